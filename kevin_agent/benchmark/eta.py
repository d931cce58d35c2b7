"""How far a benchmark played in this process got, and when it should end.

Tasks play side by side, so the mean task's duration says little: the ETA is the wall time per
candidate judged so far (every task's verdicts together) times the candidates still expected. A
task that ends (done, failed, stopped early at its target speedup) expects no more; a task that
has judged nothing yet expects its trajectories x turns (less what a resumed run stored).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Optional


class BenchEta:
    """Candidates expected per task (by index), judged so far, tasks done; thread-safe."""

    def __init__(self, expected: Mapping[int, int], clock: Callable[[], float] = time.monotonic) -> None:
        self._expected = {index: max(0, count) for index, count in expected.items()}
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self.judged = 0
        self.done = 0

    def judged_one(self, index: int) -> None:
        """A verdict of task ``index`` arrived."""
        with self._lock:
            self.judged += 1
            self._expected[index] = max(0, self._expected.get(index, 0) - 1)

    def finished(self, index: int) -> None:
        """Task ``index`` ended: nothing more is expected from it."""
        with self._lock:
            self.done += 1
            self._expected[index] = 0

    def seconds_left(self) -> Optional[float]:
        """None until something was judged (or when nothing is left)."""
        with self._lock:
            left = sum(self._expected.values())
            elapsed = self._clock() - self._started
            if not left:
                return None
            if self.judged:
                return elapsed / self.judged * left
        return None

    def text(self) -> str:
        """"; ETA 7 min (12 candidates judged, one every 9.5 s)" or "" when unknown."""
        seconds = self.seconds_left()
        if seconds is None:
            return ""
        with self._lock:
            per = (self._clock() - self._started) / self.judged
            judged = self.judged
        when = f"ETA {seconds / 60:.0f} min" if seconds >= 60 else "ETA under a minute"
        return f"; {when} ({judged} candidates judged, one every {per:.1f} s)"
