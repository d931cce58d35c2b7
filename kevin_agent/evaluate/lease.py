"""Leases across processes. A lease per physical GPU: one candidate (or baseline) on a GPU at a
time, whichever kevin process (language server, `kevin optimize`, the TUI) asks; the run lock
(``runs.locks``) is one too.

An ``flock`` on ``<lease dir>/<GPU uuid>.lock``, which the kernel releases when the holder dies,
so a killed process never leaves its GPU locked. The holder writes who it is into the file, so a
waiter can say "waiting for GPU 0, in use by kevin optimize pid 4242". Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

LEASE_DIR_ENV = "KEVIN_LEASE_DIR"
POLL_S = 0.05


def lease_dir() -> Path:
    """``$KEVIN_LEASE_DIR``, else a folder in the system temp dir shared by every local user."""
    folder = Path(os.environ.get(LEASE_DIR_ENV) or Path(tempfile.gettempdir()) / "kevin-agent-gpu-leases")
    if not folder.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)  # shared, like /tmp: every user's kevin waits on the same GPU
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

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self._fd: Optional[int] = None

    def holder(self) -> Optional[str]:
        """Who holds the lease now, in words (None when free or unknown)."""
        try:
            raw = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return None
        if not raw.get("pid"):
            return None
        return f"{raw.get('command', 'a process')} pid {raw['pid']}"

    def try_acquire(self) -> bool:
        """Take the lease if it is free now (OSError when its file cannot be opened)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        self._write_holder(fd)
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
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

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lease file: locking needs no write access
            return os.open(self.path, os.O_RDONLY)

    @staticmethod
    def _write_holder(fd: int) -> None:
        record = json.dumps({"pid": os.getpid(), "command": this_process(), "since": time.time()})
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)


class GpuLease(Lease):
    """The lease of one physical GPU, keyed by its UUID, in the shared lease folder."""

    def __init__(self, key: str, label: str, folder: Optional[Path] = None) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        super().__init__((folder or lease_dir()) / f"{safe}.lock", label)
