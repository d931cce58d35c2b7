"""Process-level helpers of the isolation layer: secret scrubbing, niceness, group kill, crash reasons.

Standard library only.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, VerdictDetails

STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 3000

SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
SECRET_NAME_PREFIXES = ("OPENAI_", "ANTHROPIC_", "HF_", "HUGGING", "AWS_", "GITHUB_", "GH_", "AZURE_", "GOOGLE_")
# The only variables of the parent's environment a child sees (GPU workers, the recorder, ninja and
# the compilers): what finds programs and libraries, picks the GPU and the locale. Everything else
# (API keys, tokens, NVCC_PREPEND_FLAGS, LD_PRELOAD, ...) stays behind, whatever its name.
ALLOWED_VARIABLES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "TERM", "USER",
    "LOGNAME", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "CC", "CXX",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX", "KEVIN_SANDBOX_VERBOSE",
})


def is_secret_name(name: str) -> bool:
    """True for environment variable names that may hold credentials."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS) or upper.startswith(SECRET_NAME_PREFIXES)


def scrubbed_environment(base: Optional[Mapping[str, str]] = None, scratch: Optional[str] = None) -> dict[str, str]:
    """The environment of a child, built from ``ALLOWED_VARIABLES`` of ``base`` (default
    ``os.environ``), never from the whole of it: no API key or other secret reaches a child.

    ``scratch`` (the child's own folder) becomes HOME and TMPDIR, so nothing the child writes by
    default lands in the user's home. The folder this very ``kevin_agent`` was imported from leads
    PYTHONPATH, so children run the same package, installed or not.
    """
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if name in ALLOWED_VARIABLES and not is_secret_name(name)}
    if "HOME" in source and scratch is None:
        env["HOME"] = source["HOME"]
    if scratch is not None:
        env["HOME"] = env["TMPDIR"] = scratch
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), source.get("PYTHONPATH", "")) if p)
    return env


# Builds run this much nicer than kevin itself: with a batch's builds filling every core, the GPU
# lane's worker (a baseline's timing, a candidate's) and the workers starting beside it get the CPU
# first, and the compiles still take every cycle left idle.
BUILD_NICENESS = 10


def niced(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` under ``nice -n BUILD_NICENESS`` (found in /usr/bin or /bin, never on a PATH a caller
    set), inherited by everything it starts; ``argv`` as it is without a ``nice``. A program not
    found on ``env``'s PATH raises FileNotFoundError, as starting it directly would."""
    nice = shutil.which("nice", path="/usr/bin:/bin")
    if nice is None:
        return argv
    if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    return [nice, "-n", str(BUILD_NICENESS), *argv]


def package_root() -> str:
    """The folder holding the ``kevin_agent`` package this process imported."""
    import kevin_agent

    return str(Path(kevin_agent.__file__).resolve().parent.parent)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_group(proc: subprocess.Popen, wait: bool = True) -> None:
    """SIGKILL the whole process group of ``proc`` (its own session), then reap it (unless not
    ``wait``: a later call reaps it, and its exit is nobody's wait meanwhile)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    if not wait:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class NotARegularFile(OSError):
    """A path a child could write names a FIFO, a device, a socket or a folder: never read."""


def open_child_file(path: Path | str, dir_fd: int | None = None) -> io.BufferedReader:
    """A file in a folder a child could write, opened without trusting the path: never through a
    link (O_NOFOLLOW), never blocking on a FIFO or device (O_NONBLOCK, regular files only).
    OSError (``NotARegularFile`` for a FIFO, device or folder) when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    return io.BufferedReader(io.FileIO(fd, "rb"))


def read_child_file(path: Path, limit: int = 64 * 1024 * 1024, tail: bool = False) -> bytes:
    """The content of a file in a folder a child could write (``open_child_file``), at most
    ``limit`` bytes (the last ones when ``tail``)."""
    with open_child_file(path) as handle:
        if tail:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
        return handle.read(limit)


def tail_text(path: Path, lines: int = STDERR_TAIL_LINES, chars: int = STDERR_TAIL_CHARS) -> str:
    """The last lines of a log file a child wrote (empty when missing, a link or not a file)."""
    try:
        text = read_child_file(path, 64 * 1024, tail=True).decode("utf-8", errors="replace")
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


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path | str) -> bool:
    """Remove a folder a child shaped (a recorder's scratch, a worker's job folder), whatever it
    holds: never recursing on its depth (a 3000-deep chain of folders), never following a link,
    making folders writable where they are not, never raising. True when it is gone."""
    try:
        _remove_tree(os.fspath(path))
    except (OSError, ValueError):
        pass
    return not os.path.lexists(path)


def _remove_tree(path: str) -> None:
    try:
        fd = os.open(path, _FOLDER_FLAGS)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # a file or a link in its place: the link goes
            os.unlink(path)
            return
        _make_writable(path, None)
        fd = os.open(path, _FOLDER_FLAGS)
    _empty(fd)
    os.rmdir(path)


def _empty(fd: int) -> None:
    """Empty the folder open as ``fd`` (closed on return), depth first, holding two descriptors at
    most: it climbs back through ``..``, checked against the folder it came from."""
    levels: list[tuple[str, list[str], tuple[int, int]]] = []
    pending = _clear_files(fd)
    try:
        while True:
            if pending:
                name = pending.pop()
                child = _open_folder(name, fd)
                if child is not None:
                    info = os.fstat(fd)
                    levels.append((name, pending, (info.st_dev, info.st_ino)))
                    os.close(fd)
                    fd, pending = child, _clear_files(child)
                continue
            if not levels:
                return
            name, pending, where = levels.pop()
            parent = os.open("..", _FOLDER_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != where:
                raise OSError(errno.ESTALE, "a folder moved while it was removed")
            _quietly(os.rmdir, name, dir_fd=fd)
    finally:
        os.close(fd)


def _clear_files(fd: int) -> list[str]:
    """Unlink everything in the folder ``fd`` but its folders (links are unlinked, never
    followed); the names of those folders."""
    info = os.fstat(fd)
    if stat.S_IMODE(info.st_mode) & 0o700 != 0o700:
        _quietly(os.fchmod, fd, 0o700)
    folders = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                _quietly(os.unlink, entry.name, dir_fd=fd)
    return folders


def _open_folder(name: str, parent: int) -> int | None:
    """The sub-folder ``name`` of ``parent`` opened without following a link (made readable and
    writable first when it is not), or None when that cannot be done."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    except PermissionError:
        _make_writable(name, parent)
    except OSError:
        return None
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    except OSError:
        return None


def _make_writable(name: str, parent: int | None) -> None:
    """chmod 0700 the folder ``name`` through an O_PATH descriptor (no link is followed)."""
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return
    try:
        _quietly(os.chmod, f"/proc/self/fd/{handle}", 0o700)
    finally:
        os.close(handle)


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> None:
    """``call(*args, **kwargs)``, its OSError ignored (what stays is told by ``remove_tree``)."""
    try:
        call(*args, **kwargs)
    except OSError:
        pass
