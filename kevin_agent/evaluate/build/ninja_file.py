"""Our own ninja files (never torch's private writers) and the shared precompiled torch header."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.evaluate.build.flags import Toolchain, ninja_binary

PCH_HEADER = "kevin_torch_ext.h"


@dataclass
class Step:
    """One compile: ``rule`` is "cxx" or "cuda"; ``flags`` are its own flags."""

    source: str
    output: str
    rule: str
    flags: list[str] = field(default_factory=list)


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


def write_ninja(directory: Path, tc: Toolchain, steps: list[Step], target: str, ldflags: list[str]) -> Path:
    """A build.ninja compiling ``steps`` and linking them into ``target`` (names relative to ``directory``)."""
    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {shlex.quote(tc.cxx)}",
        f"nvcc = {shlex.quote(tc.nvcc)}",
        "rule cxx",
        "  command = $cxx $flags -c $in -o $out",
        "rule cuda",
        "  command = $nvcc $flags -c $in -o $out",
        "rule link",
        "  command = $cxx $in $ldflags -o $out",
    ]
    for step in steps:
        lines += [f"build {step.output}: {step.rule} {step.source}", f"  flags = {_quote(step.flags)}"]
    lines += [f"build {target}: link {' '.join(s.output for s in steps)}", f"  ldflags = {_quote(ldflags)}"]
    lines += [f"default {target}", ""]
    path = directory / "build.ninja"
    path.write_text("\n".join(lines))
    return path


def run_ninja(directory: Path, jobs: int, timeout_s: float, log_path: Path,
              confine: Optional[Callable[[list[str]], list[str]]] = None) -> NinjaRun:
    """Run ninja in ``directory`` (its command line passed through ``confine``, the sandbox, when
    given). A timeout kills the whole process group."""
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
    argv = [ninja_binary(), "-C", str(directory), "-j", str(max(1, jobs))]
    proc = subprocess.Popen(
        confine(argv) if confine is not None else argv,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env,
        start_new_session=True,
    )
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        ok = proc.returncode == 0
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it finished just now
            pass
        output, _ = proc.communicate()
        output += f"\nerror: the build did not finish within {timeout_s:.0f} s and was stopped\n"
        ok = False
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(output)
    return NinjaRun(ok, output, timed_out)


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


def ensure_pch(root: Path, tc: Toolchain, cxx_flags: list[str], timeout_s: float = 600.0) -> PchInfo:
    """The precompiled <torch/extension.h> for these flags, built once into the cache and shared."""
    include_flags = tc.includes()
    key = hashlib.sha256(json.dumps([tc.fingerprint(), cxx_flags]).encode()).hexdigest()[:20]
    final = root / "pch" / key
    if (final / (PCH_HEADER + ".gch")).is_file():
        return PchInfo(final / PCH_HEADER, 0.0)
    with file_lock(root / "locks" / f"pch-{key}.lock"):
        if (final / (PCH_HEADER + ".gch")).is_file():
            return PchInfo(final / PCH_HEADER, 0.0)
        if (final / "failed").is_file():
            return PchInfo(None, 0.0)
        start = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=_ensure(root / "pch")))
        header = tmp / PCH_HEADER
        header.write_text("#include <torch/extension.h>\n")
        cmd = [tc.cxx, *cxx_flags, *include_flags, "-x", "c++-header", str(header), "-o", str(header) + ".gch"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
        except (OSError, subprocess.SubprocessError):  # no compiler, or a timeout: build without a PCH
            shutil.rmtree(tmp, ignore_errors=True)  # not recorded as failed: it may work next time
            return PchInfo(None, time.monotonic() - start)
        (tmp / "pch.log").write_text(shlex.join(cmd) + "\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            (tmp / "failed").write_text(proc.stderr[-2000:])
        try:
            os.rename(tmp, final)  # the .gch is only used next to the header it was built for
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if proc.returncode != 0:
            return PchInfo(None, time.monotonic() - start)
        return PchInfo(final / PCH_HEADER, time.monotonic() - start)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
