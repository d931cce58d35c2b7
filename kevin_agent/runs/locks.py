"""``RunLock``: one process plays a stored run at a time (a second resume is refused).

An ``flock`` on ``.kevin/locks/<run id>.lock`` beside the store; the kernel drops it when the
holder exits, so a killed process never leaves a run locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Optional

from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.store import RunStore


class RunLock:
    """Held from opening a run until its play ends."""

    def __init__(self, path: Path, fd: Optional[int]) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def take(cls, store: RunStore, run_id: str) -> RunLock:
        """Lock ``run_id``; UserInputError naming the holder when another process plays it."""
        folder = store.path.parent / "locks"
        path = folder / f"{run_id}.lock"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise EnvironmentProblem(f"cannot lock run {run_id} ({path}): {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise UserInputError(f"run {run_id} is already being played by another kevin process"
                                 f"{f' (pid {holder})' if holder else ''}; wait for it or cancel it "
                                 "there") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
