"""Leases across processes. A lease per physical GPU: one candidate (or baseline) on a GPU at a
time, whichever kevin process (language server, `kevin optimize`, the TUI) asks; the run lock
(``runs.locks``) is one too.

An ``flock`` on ``<lease dir>/<GPU uuid>.lock``, which the kernel releases when the holder dies,
so a killed process never leaves its GPU locked. The holder writes who it is into the file, so a
waiter can say "waiting for GPU 0, in use by kevin optimize pid 4242". Standard library only.

The lease folder is shared by every local user (like /tmp), so its files are untrusted: a lease
file is opened without following symlinks and must be a regular file, and only a file this user
owns (with no other hard link) is ever written or truncated; another user's file is only locked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

from kevin_agent.errors import EnvironmentProblem

LEASE_DIR_ENV = "KEVIN_LEASE_DIR"
# Fixed, not under $TMPDIR: processes started with another TMPDIR (editors set their own) must
# still see each other's leases.
DEFAULT_LEASE_DIR = "/tmp/kevin-agent-gpu-leases"
POLL_S = 0.05
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a planted FIFO never blocks us
_FIX = f"set {LEASE_DIR_ENV} to a folder every kevin process of this machine can write"


def lease_dir() -> Path:
    """``$KEVIN_LEASE_DIR``, else ``/tmp/kevin-agent-gpu-leases``, shared by every local user.
    Made shared (mode 1777, like /tmp) only when this process creates it; a folder that already
    exists is used as it is. EnvironmentProblem when it cannot be made or is not a folder."""
    folder = Path(os.environ.get(LEASE_DIR_ENV) or DEFAULT_LEASE_DIR)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass  # someone's already (or a file: refused below); used as it is, its files are checked
    except OSError as err:
        raise EnvironmentProblem(f"cannot create the GPU lease folder {folder}: {err.strerror}; {_FIX}") from None
    else:
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o1777)  # ours: shared like /tmp, every user's kevin waits on the same GPU
    if not folder.is_dir():
        raise EnvironmentProblem(f"the GPU lease folder {folder} is not a folder; {_FIX}")
    return folder


def this_process() -> str:
    """How a waiter sees us: ``kevin optimize``, ``kevin lsp``, ``pytest``..."""
    argv = [os.path.basename(a) for a in sys.argv[:2] if a]
    if argv and argv[0] in ("__main__.py", "kevin") and len(argv) > 1:
        return f"kevin {argv[1]}"
    if not argv or argv[0].startswith("-"):  # python -c ..., an embedded interpreter
        return "python"
    return argv[0]


class Lease:
    """An ``flock`` on ``path`` shared by processes; the holder writes who it is into the file.

    ``with lease.hold(cancel, on_wait) as held:`` waits for it (held is False only when cancelled
    first); ``try_acquire`` / ``release`` take it without waiting, for as long as the caller likes.
    """

    fix = "make its folder writable by this user"  # what the user can do when the file cannot be used

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self._fd: Optional[int] = None
        self._ours = False  # the file is this user's own: the holder record may be written

    def holder(self) -> Optional[str]:
        """Who holds the lease now, in words (None when free or unknown)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _OPEN_FLAGS)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            raw = json.loads(os.pread(fd, 4096, 0).decode(errors="replace") or "{}")
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not isinstance(raw, dict) or not raw.get("pid"):
            return None
        return f"{raw.get('command', 'a process')} pid {raw['pid']}"

    def try_acquire(self) -> bool:
        """Take the lease if it is free now (EnvironmentProblem when its file cannot be used)."""
        fd, ours = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as err:
            os.close(fd)
            raise self._problem(err) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ours = fd, ours
        if ours:
            self._write_holder(fd)
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if self._ours:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def hold(self, cancel: Optional[threading.Event] = None,
             on_wait: Optional[Callable[[str], None]] = None) -> Iterator[bool]:
        told: Optional[str] = None
        while not self.try_acquire():
            if cancel is not None and cancel.is_set():
                yield False
                return
            message = f"waiting for {self.label}, in use by {self.holder() or 'another process'}"
            if on_wait is not None and message != told:
                on_wait(message)
                told = message
            time.sleep(POLL_S)
        try:
            yield True
        finally:
            self.release()

    def _open(self) -> tuple[int, bool]:
        """The lease file, never through a symlink and only if it is a regular file, and whether
        it is this user's own (then the holder record may be written)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
        except PermissionError as err:  # another user's lease file: locking needs no write access
            try:
                fd = os.open(self.path, os.O_RDONLY | _OPEN_FLAGS)
            except OSError:
                raise self._problem(err) from None
        except OSError as err:
            raise self._problem(err) from None
        try:
            info = os.fstat(fd)
        except OSError as err:
            os.close(fd)
            raise self._problem(err) from None
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise EnvironmentProblem(f"the lease file {self.path} is not a regular file: remove it")
        return fd, info.st_uid == os.geteuid() and info.st_nlink == 1

    def _problem(self, err: OSError) -> EnvironmentProblem:
        if err.errno == errno.ELOOP:
            return EnvironmentProblem(f"the lease file {self.path} is a symbolic link: remove it")
        return EnvironmentProblem(f"cannot use the lease file {self.path} ({err.strerror}): {self.fix}")

    @staticmethod
    def _write_holder(fd: int) -> None:
        record = json.dumps({"pid": os.getpid(), "command": this_process(), "since": time.time()})
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)


class GpuLease(Lease):
    """The lease of one physical GPU, keyed by its UUID, in the shared lease folder."""

    fix = _FIX

    def __init__(self, key: str, label: str, folder: Optional[Path] = None) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        super().__init__((folder or lease_dir()) / f"{safe}.lock", label)
