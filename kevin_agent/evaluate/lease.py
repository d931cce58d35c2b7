"""A lease per physical GPU across processes: one candidate (or baseline) on a GPU at a time,
whichever kevin process (language server, `kevin optimize`, the TUI) asks.

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


class GpuLease:
    """``with lease.hold(cancel, on_wait) as held:`` — held is False only when cancelled first."""

    def __init__(self, key: str, label: str, folder: Optional[Path] = None) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        self.path = (folder or lease_dir()) / f"{safe}.lock"
        self.label = label

    def holder(self) -> Optional[str]:
        """Who holds the lease now, in words (None when free or unknown)."""
        try:
            raw = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return None
        if not raw.get("pid"):
            return None
        return f"{raw.get('command', 'a process')} pid {raw['pid']}"

    @contextlib.contextmanager
    def hold(self, cancel: Optional[threading.Event] = None,
             on_wait: Optional[Callable[[str], None]] = None) -> Iterator[bool]:
        fd = self._open()
        try:
            if not self._acquire(fd, cancel, on_wait):
                yield False
                return
            self._write_holder(fd)
            try:
                yield True
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lease file: locking needs no write access
            return os.open(self.path, os.O_RDONLY)

    def _acquire(self, fd: int, cancel: Optional[threading.Event],
                 on_wait: Optional[Callable[[str], None]]) -> bool:
        told: Optional[str] = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            if cancel is not None and cancel.is_set():
                return False
            message = f"waiting for {self.label}, in use by {self.holder() or 'another process'}"
            if on_wait is not None and message != told:
                on_wait(message)
                told = message
            time.sleep(POLL_S)

    @staticmethod
    def _write_holder(fd: int) -> None:
        record = json.dumps({"pid": os.getpid(), "command": this_process(), "since": time.time()})
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
