"""Trim a compiler log to the first few errors, with file:line the model can act on.

Generated files carry ``#line`` directives, so gcc and nvcc already name ``cuda_sources:LINE`` /
``cpp_sources:LINE`` (the candidate's own source strings); this module only picks and shortens.
"""

from __future__ import annotations

import re

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


# A confined compile's output when the sandbox, not the sources, made it fail: the launcher's own
# lines ("kevin-sandbox: sandbox required but ...", "kevin-sandbox: cannot run ninja: ..."; not the
# verbose "kevin-sandbox: sandbox: landlock ..."), and refusals of Landlock (EACCES) and seccomp (EPERM)
LAUNCHER_PREFIX = "kevin-sandbox: "
SANDBOX_REFUSALS = ("Permission denied", "Operation not permitted")


def sandbox_refused(text: str) -> bool:
    """True when a compile's output shows the sandbox, not the sources, stopped it."""
    return any(line.startswith(LAUNCHER_PREFIX) and not line.startswith(LAUNCHER_PREFIX + "sandbox: ")
               or any(refusal in line for refusal in SANDBOX_REFUSALS) for line in text.splitlines())
