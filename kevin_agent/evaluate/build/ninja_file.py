"""Our own ninja files (never torch's private writers) and the shared precompiled torch header.

Every compile runs confined (``confine``: the sandbox's command prefix), niced below kevin itself
(``BUILD_NICENESS``), with an allow-listed environment whose HOME and TMPDIR are its own build
folder; what it prints comes back over a pipe (at most ``MAX_OUTPUT`` characters kept) and is
appended by the parent to a log in a folder no compile can write, opened without following links.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.evaluate.build.flags import Toolchain, ninja_binary
from kevin_agent.evaluate.build.log import SANDBOX_FAILED, launcher_failed, sandbox_refused
from kevin_agent.evaluate.build.usage import touch
from kevin_agent.evaluate.processes import niced, scrubbed_environment
from kevin_agent.safe_text import terminal_safe

PCH_HEADER = "kevin_torch_ext.h"
PCH_RECIPE = "kevin-pch-1"  # bump when the header's flags change meaning
PCH_TEXT = "#include <torch/extension.h>\n"  # the binding's header on the whole path: all of torch, pybind11
# The binding's on the split path: tensors and pybind11's casters for them, torch::wrap_pybind_function;
# not torch::nn and the rest of the C++ frontend (its image loads in under half the time)
BINDING_PCH_TEXT = ("#include <torch/types.h>\n#include <torch/csrc/Exceptions.h>\n"
                    "#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/autograd/python_variable.h>\n")
BINDING_SHIM_TEXT = "#pragma once\n" + BINDING_PCH_TEXT
# The candidate's units see <torch/extension.h> without Python or pybind11. The split path gives them
# torch/types.h (tensors, ATen's operators, the factories: what host code of a kernel uses), whose
# precompiled image loads in half the time of torch/all.h's; the whole path, the fallback when the
# split fails outside the kernels, gives them all of torch's C++ API (torch::nn, optim, data...),
# so code that needs more than types.h still builds, as it would with stock load_inline.
PCH_TEXT_NO_PYTHON = "#include <torch/types.h>\n"
SHIM_TEXT = "#pragma once\n#include <torch/types.h>\n"
PCH_TEXT_NO_PYTHON_FULL = "#include <torch/all.h>\n"
SHIM_TEXT_FULL = "#pragma once\n#include <torch/all.h>\n"
MAX_OUTPUT = 4_000_000  # characters of a compile's output kept (the rest is counted, not stored)
TAIL_OUTPUT = 65_536  # ... except its last characters, where a limit that stopped the child is named
Confine = Callable[[list[str]], list[str]]


@dataclass
class Step:
    """One compile: ``rule`` is "cxx" or "cuda" (or "cxx_pp" / "cuda_pp": preprocess only, built
    beside the module and not linked); ``flags`` are its own flags."""

    source: str
    output: str
    rule: str
    flags: list[str] = field(default_factory=list)
    shared_key: str | None = None  # our own unit, its object kept and reused by every build (shared_objects)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (released when the process dies, too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _quote(flags: list[str]) -> str:
    return " ".join(shlex.quote(f) for f in flags).replace("$", "$$")


def write_ninja(directory: Path, tc: Toolchain, steps: list[Step], target: str | None, ldflags: list[str],
                prebuilt: tuple[str, ...] = ()) -> Path:
    """A build.ninja compiling ``steps`` and linking them, and the ``prebuilt`` objects already in
    ``directory``, into ``target`` (names relative to ``directory``); no link when ``target`` is None."""
    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {shlex.quote(tc.cxx)}",
        f"nvcc = {shlex.quote(tc.nvcc)}",
        "rule cxx",
        "  command = $cxx $flags -c $in -o $out",
        "rule cuda",
        "  command = $nvcc $flags -c $in -o $out",
        "rule cxx_pp",
        "  command = $cxx $flags -E -fpch-preprocess $in -o $out",
        "rule cuda_pp",
        "  command = $nvcc $flags -E $in -o $out",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
    ]
    for step in steps:
        lines += [f"build {step.output}: {step.rule} {step.source}", f"  flags = {_quote(step.flags)}"]
    objects = " ".join([*(s.output for s in steps if not s.rule.endswith("_pp")), *prebuilt])
    listings = " ".join(s.output for s in steps if s.rule.endswith("_pp"))  # preprocessed text: built, not linked
    if target is None:
        lines += [f"default {' '.join(s.output for s in steps)}", ""]
    else:
        lines += [f"build {target}: link {objects}" + (f" | {listings}" if listings else ""),
                  f"  ldflags = {_quote(ldflags)}", f"default {target}", ""]
    path = directory / "build.ninja"
    path.write_text("\n".join(lines))
    return path


def compile_environment(build_dir: Path) -> dict[str, str]:
    """The environment of a compile: the allow-list of ``processes``, HOME and TMPDIR its own folder."""
    return dict(scrubbed_environment(scratch=str(build_dir)), NINJA_STATUS="[%f/%t] ")


def append_log(log_path: Path, text: str) -> None:
    """Append to a log the parent owns, never through a link put in its place."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "a", encoding="utf-8", errors="replace") as log:
        log.write(text)


def run_confined(argv: list[str], cwd: Path, timeout_s: float, confine: Optional[Confine]) -> tuple[int | None, str]:
    """(exit status or None at the time limit, output) of a compile step in ``cwd``; a timeout kills
    its whole process group. Output beyond MAX_OUTPUT is drained and dropped. A confined step
    whose status is the launcher's (``log.launcher_failed``) leaves ``log.SANDBOX_FAILED`` beside
    ``cwd``, where the compile cannot write: the build cache then does not keep the result."""
    env = compile_environment(cwd)
    proc = subprocess.Popen(
        niced(confine(argv) if confine is not None else argv, env), cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    kept: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(proc, kept), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        status = None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # nothing it started outlives the step
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    reader.join(timeout=10)
    if confine is not None and launcher_failed(status):
        (cwd.parent / SANDBOX_FAILED).touch()
    return status, b"".join(kept).decode("utf-8", errors="replace")


def _drain(proc: subprocess.Popen, kept: list[bytes]) -> None:
    """The first MAX_OUTPUT bytes, then (when more came) a note and the last TAIL_OUTPUT bytes: the
    end is where the sandbox's launcher says which limit stopped the child."""
    stream = proc.stdout
    assert stream is not None
    size, tail = 0, bytearray()
    for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
        if size < MAX_OUTPUT:
            kept.append(chunk[: MAX_OUTPUT - size])
        tail += chunk[max(0, MAX_OUTPUT - size):]
        del tail[:-TAIL_OUTPUT]
        size += len(chunk)
    if size > MAX_OUTPUT:
        kept.append(f"\n... (output past {MAX_OUTPUT:,} characters dropped; its last {len(tail):,} follow)\n"
                    .encode())
        kept.append(bytes(tail))


def run_ninja(directory: Path, jobs: int, timeout_s: float, log_path: Path,
              confine: Optional[Confine] = None, targets: tuple[str, ...] = ()) -> NinjaRun:
    """Run ninja in ``directory`` (its command line passed through ``confine``, the sandbox, when
    given), for ``targets`` (default: the file's default). A timeout kills the whole process group."""
    argv = [ninja_binary(), "-C", str(directory), "-j", str(max(1, jobs)), *targets]
    status, output = run_confined(argv, directory, timeout_s, confine)
    output = terminal_safe(output)  # compilers quote the candidate: no escape sequence reaches the log file
    if status is None:
        output += f"\nerror: the build did not finish within {timeout_s:.0f} s and was stopped\n"
    try:
        append_log(log_path, output)
    except OSError as exc:  # a link in its place (an unconfined build made it): never followed
        return NinjaRun(False, output + f"\nerror: the build log could not be written: {exc.strerror}\n", False)
    return NinjaRun(status == 0, output, status is None)


@dataclass(frozen=True)
class NinjaRun:
    """How one ninja build went: its output, and whether it was stopped at the time limit."""

    ok: bool
    output: str
    timed_out: bool = False


@dataclass(frozen=True)
class PchInfo:
    header: Path | None  # pass as ``-include HEADER``; None when the PCH could not be built
    seconds: float  # time spent building it now (0.0 when it was already there)


def header_shim(root: Path, text: str = SHIM_TEXT) -> Path:
    """A folder whose ``torch/extension.h`` is ``text`` (``-I`` it before torch's own folders). The
    candidate's units get torch without Python or pybind11 (``SHIM_TEXT``): they see the C++ API
    only, so nothing of pybind11's inline code lands in their objects and their imports are their
    own calls. The binding's gets its smaller header set (``BINDING_SHIM_TEXT``)."""
    folder = root / "pch" / f"shim-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    header = folder / "torch" / "extension.h"
    if not header.is_file():
        tmp = Path(tempfile.mkdtemp(prefix="shim-", dir=_ensure(root / "pch")))
        (tmp / "torch").mkdir()
        (tmp / "torch" / "extension.h").write_text(text)
        try:
            os.rename(tmp, folder)
        except OSError:  # made by another process meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    touch([folder])  # in use (the size cap's order)
    return folder


def ensure_pch(root: Path, tc: Toolchain, cxx_flags: list[str], timeout_s: float = 600.0,
               confine_for: Optional[Callable[[Path], Optional[Confine]]] = None,
               header_text: str = PCH_TEXT) -> PchInfo:
    """The precompiled ``header_text`` (<torch/extension.h>, or the Python-free ``PCH_TEXT_NO_PYTHON``)
    for these flags, built once into the cache and shared.

    ``cxx_flags`` must be flags kevin-agent chose (``flags.pch_flags``), never a candidate's: every
    later build reads this header. The compile is confined like every other (``confine_for(folder)``)."""
    toolchain_only = {k: v for k, v in tc.fingerprint().items() if k != "recipe"}  # not the extensions' recipe
    key = hashlib.sha256(json.dumps([PCH_RECIPE, toolchain_only, cxx_flags, header_text]).encode()).hexdigest()[:20]
    final = root / "pch" / key
    header = final / "work" / PCH_HEADER
    if header.with_name(PCH_HEADER + ".gch").is_file():
        touch([final])  # in use: the cache's size cap evicts least recently used headers first
        return PchInfo(header, 0.0)
    with file_lock(root / "locks" / f"pch-{key}.lock"):
        if header.with_name(PCH_HEADER + ".gch").is_file():
            return PchInfo(header, 0.0)
        if (final / "failed").is_file():
            return PchInfo(None, 0.0)
        start = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=_ensure(root / "pch")))
        work = tmp / "work"  # the only folder the compile may write; the log and marker stay outside it
        work.mkdir()
        (work / PCH_HEADER).write_text(header_text)
        cmd = [tc.cxx, *cxx_flags, *tc.includes(), "-x", "c++-header", PCH_HEADER, "-o", PCH_HEADER + ".gch"]
        try:
            status, output = run_confined(cmd, work, timeout_s, confine_for(work) if confine_for else None)
        except OSError:  # no compiler: build without a PCH
            status, output = None, ""
        if status != 0 and (status is None or sandbox_refused(output)):
            shutil.rmtree(tmp, ignore_errors=True)  # not the header's fault: it may work next time
            return PchInfo(None, time.monotonic() - start)
        return _store_pch(tmp, final, work, shlex.join(cmd) + "\n" + output, status == 0, start)


def _store_pch(tmp: Path, final: Path, work: Path, log: str, ok: bool, start: float) -> PchInfo:
    """Rename the built header into place (or record the failure); the parent writes the log."""
    append_log(tmp / "pch.log", log)
    if ok:
        gch = os.open(work / (PCH_HEADER + ".gch"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        ok = stat.S_ISREG(os.fstat(gch).st_mode)
        os.close(gch)
    if not ok:
        append_log(tmp / "failed", log[-2000:])
    try:
        os.rename(tmp, final)  # the .gch is only used next to the header it was built for
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return PchInfo(final / "work" / PCH_HEADER if ok else None, time.monotonic() - start)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
