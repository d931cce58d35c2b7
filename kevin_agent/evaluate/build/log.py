"""Trim a compiler log to the first few errors, with file:line the model can act on.

Generated files carry ``#line`` directives, so gcc and nvcc already name ``cuda_sources:LINE`` /
``cpp_sources:LINE`` (the candidate's own source strings); this module only picks and shortens.
"""

from __future__ import annotations

import re

from kevin_agent.evaluate.sandbox.launch import EXIT_UNCONFINED
from kevin_agent.evaluate.sandbox.relay import EXIT_LIMIT

MAX_ERRORS = 3
MAX_CHARS = 2000
MAX_LINE = 4000  # characters of one log line looked at: the errors kept are 2000 in all, and a line of
# megabytes (the compiler quoting a candidate's one-line source) made shortening its paths quadratic
_GCC = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(?::\d+)?: (?:fatal )?error\b")
_NVCC = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error\b")
_OTHER = re.compile(r"(undefined reference to|undefined symbol|ld returned|nvcc fatal|^error:|: fatal error:)")
_NOISE = re.compile(r"^(In file included from|\s+from |ninja: |FAILED: |\[\d+/\d+\] |In function |compilation "
                    r"terminated|\d+ errors? detected)")


def _shorten_path(line: str) -> str:
    line = re.sub(r"\S*/site-packages/torch/include/", "torch/include/", line)
    return re.sub(r"(?<![\w.])/\S*/(host\.cpp|main\.cpp|kernels\.cu|cuda\.cu)", r"\1", line)


def trim_errors(log: str, max_errors: int = MAX_ERRORS, max_chars: int = MAX_CHARS) -> str:
    """The first ``max_errors`` errors with a little context, at most ``max_chars`` characters."""
    lines = [line if len(line) <= MAX_LINE else line[:MAX_LINE] + " ... (line cut)" for line in log.splitlines()]
    blocks: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines) and len(blocks) < max_errors:
        line = lines[i]
        if _GCC.match(line) or _NVCC.match(line) or _OTHER.search(line):
            block = [line]
            j = i + 1
            while j < len(lines) and len(block) < 4:
                nxt = lines[j]
                if (_GCC.match(nxt) or _NVCC.match(nxt) or _OTHER.search(nxt) or _NOISE.match(nxt)
                        or re.match(r"^\S+:\d+(:\d+)?: (note|warning)", nxt)):
                    break
                if nxt.strip():
                    block.append(nxt)
                j += 1
            text = _shorten_path("\n".join(block))
            if text not in seen:
                seen.add(text)
                blocks.append(text)
            i = j
        else:
            i += 1
    if not blocks:
        tail = [ln for ln in lines if ln.strip() and not _NOISE.match(ln)][-8:]
        blocks = [_shorten_path("\n".join(tail)) or "the build failed without a compiler message"]
    out = "\n".join(blocks)
    return out if len(out) <= max_chars else out[: max_chars - 15].rstrip() + "\n... (trimmed)"


def errors_only_in(log: str, names: tuple[str, ...]) -> bool:
    """True when every error the log names is in one of the files ``names`` (e.g. cuda_sources)."""
    found = False
    for line in log.splitlines():
        m = _GCC.match(line) or _NVCC.match(line)
        if m:
            found = True
            if m.group("file").rsplit("/", 1)[-1] not in names:
                return False
        elif _OTHER.search(line):
            return False
    return found


# Whether the sandbox, not the sources, made a confined compile fail is known from the launcher's
# exit status alone (the compiler prints what the candidate wrote: an ``#error Permission denied``
# must not pass for a refusal): it could not confine (EXIT_UNCONFINED), a bound stopped the child
# (EXIT_LIMIT), or the program could not be started (127). ninja exits 0, 1 or 2 itself. The
# parent records such a status in SANDBOX_FAILED, a file beside the compile's folder (where no
# compile can write), and a build with that mark is not cached.
LAUNCHER_FAILED = (EXIT_UNCONFINED, EXIT_LIMIT, 127)
SANDBOX_FAILED = "sandbox-failed"
# The launcher's own lines ("kevin-sandbox: sandbox required but ...", "kevin-sandbox: cannot run
# ninja: ..."), and refusals of Landlock (EACCES) and seccomp (EPERM): read only for compiles of
# kevin's own inputs (the shared precompiled header), never for a candidate's.
LAUNCHER_PREFIX = "kevin-sandbox: "
SANDBOX_REFUSALS = ("Permission denied", "Operation not permitted")


def launcher_failed(status: int | None) -> bool:
    """True when a confined compile's exit status is the launcher's, not the compiler's."""
    return status in LAUNCHER_FAILED


def sandbox_refused(text: str) -> bool:
    """True when the output of a compile of kevin's own inputs shows the sandbox stopped it."""
    return any(line.startswith(LAUNCHER_PREFIX) and not line.startswith(LAUNCHER_PREFIX + "sandbox: ")
               or any(refusal in line for refusal in SANDBOX_REFUSALS) for line in text.splitlines())
