"""``RunLock``: one process plays a stored run at a time (a second resume is refused).

A ``Lease`` (``evaluate.lease``: an ``flock`` the kernel drops when the holder exits, so a killed
process never leaves a run locked) on ``.kevin/locks/<run id>.lock`` beside the store.
"""

from __future__ import annotations

from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.evaluate.lease import Lease
from kevin_agent.store import RunStore


class RunLock:
    """Held from opening a run until its play ends."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    @classmethod
    def take(cls, store: RunStore, run_id: str) -> RunLock:
        """Lock ``run_id``; UserInputError naming the holder when another process plays it."""
        folder = store.path.parent / "locks"
        lease = Lease(folder / f"{run_id}.lock", f"run {run_id}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            taken = lease.try_acquire()
        except OSError as err:
            raise EnvironmentProblem(f"cannot lock run {run_id} ({lease.path}): {err.strerror}") from None
        if not taken:
            holder = lease.holder()
            raise UserInputError(f"run {run_id} is already being played by another kevin process"
                                 f"{f' ({holder})' if holder else ''}; wait for it or cancel it there")
        return cls(lease)

    def release(self) -> None:
        self.lease.release()
