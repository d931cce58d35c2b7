"""The parent's part in the channel: two pipes made before the worker and its judge start.

The worker gets one pipe's read end and the other's write end, the judge the opposite ends, each
named in its environment (``wire.CHANNEL_ENV``); the parent closes all four once both have
started, so either side sees the other's end of file when it exits. On the CPU the stand-in
transport also needs a folder both may write (``wire.FOLDER_ENV``): one in the job folder.
Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kevin_agent.evaluate.observe.wire import CHANNEL_ENV, FOLDER_ENV


@dataclass
class ObserveChannel:
    worker_fds: tuple[int, int]  # (read, write) in the worker
    judge_fds: tuple[int, int]  # (read, write) in the judge
    folder: Path

    @classmethod
    def make(cls, scratch: Path) -> ObserveChannel:
        to_judge_r, to_judge_w = os.pipe()
        to_worker_r, to_worker_w = os.pipe()
        folder = scratch / "observe"
        folder.mkdir(exist_ok=True)
        return cls((to_worker_r, to_judge_w), (to_judge_r, to_worker_w), folder)

    @property
    def worker_env(self) -> dict[str, str]:
        return {CHANNEL_ENV: f"{self.worker_fds[0]},{self.worker_fds[1]}", FOLDER_ENV: str(self.folder)}

    @property
    def judge_env(self) -> dict[str, str]:
        return {CHANNEL_ENV: f"{self.judge_fds[0]},{self.judge_fds[1]}", FOLDER_ENV: str(self.folder)}

    def close(self) -> None:
        for fd in (*self.worker_fds, *self.judge_fds):
            try:
                os.close(fd)
            except OSError:
                pass
