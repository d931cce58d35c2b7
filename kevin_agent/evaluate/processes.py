"""Process-level helpers of the isolation layer: secret scrubbing, group kill, crash reasons.

Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, VerdictDetails

STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 3000

SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
SECRET_NAME_PREFIXES = ("OPENAI_", "ANTHROPIC_", "HF_", "HUGGING", "AWS_", "GITHUB_", "GH_", "AZURE_", "GOOGLE_")


def is_secret_name(name: str) -> bool:
    """True for environment variable names that may hold credentials."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS) or upper.startswith(SECRET_NAME_PREFIXES)


def scrubbed_environment(base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) without anything that may hold a secret.

    PATH, HOME, CUDA_*, TORCH_*, LD_LIBRARY_PATH, PYTHONPATH and the like stay; a secret-looking
    name is dropped even under those prefixes. The folder this very ``kevin_agent`` was imported
    from leads PYTHONPATH, so children run the same package, installed or not.
    """
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if not is_secret_name(name)}
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH", "")) if p)
    return env


def package_root() -> str:
    """The folder holding the ``kevin_agent`` package this process imported."""
    import kevin_agent

    return str(Path(kevin_agent.__file__).resolve().parent.parent)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the whole process group of ``proc`` (its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def tail_text(path: Path, lines: int = STDERR_TAIL_LINES, chars: int = STDERR_TAIL_CHARS) -> str:
    """The last lines of a log file (empty when missing)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-chars:]


def crash_reason(returncode: Optional[int], timed_out: bool, timeout_s: float, had_result: bool) -> str:
    """One sentence saying how a worker ended without a usable verdict."""
    if timed_out:
        return f"timed out after {timeout_s:g} s"
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        hint = " (possibly out of memory)" if -returncode == signal.SIGKILL else ""
        return f"the process was killed by signal {name}{hint}"
    if had_result:
        return f"the process exited with code {returncode} and an unreadable result"
    if returncode == 0:
        return "the process exited without writing a result"
    return f"the process exited with code {returncode} without writing a result"


def crash_verdict(reason: str, stderr_tail: str) -> Verdict:
    """A LOAD-stage failure for a worker that died, hung or exited early."""
    text = reason + (f"\nLast lines of stderr:\n{stderr_tail}" if stderr_tail else "")
    return Verdict(Stage.LOAD, False, feedback.runtime_error(text), VerdictDetails(error=text))
