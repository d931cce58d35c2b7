"""How many GPU workers a pool keeps starting ahead of its jobs.

A worker's start (spawn -> READY: Python, torch, a CUDA context, the profiler) takes seconds and
differs threefold between hosts of one cloud type (H100 hosts: 3.3 s and 11 s medians); a
candidate's job on the GPU takes about one. With ``n`` spares each has ``n`` jobs' time to start
before it is needed, so a pool keeps ``ceil(start / job)`` of them, between its floor (the
configured spares) and a ceiling (each spare holds a CUDA context and host memory)."""

from __future__ import annotations

import math
import os
import statistics
import threading
from collections import deque

# Recent starts and jobs that size the spares: few enough to follow a host whose load changes
# (a batch's builds end), enough that one slow start does not double them.
WINDOW = 6
# Shorter jobs than this count as this long: a burst of instant failures must not start dozens.
SHORTEST_JOB_S = 0.25
# At most this many spares per pool, and never more than one per two CPU cores.
MOST_SPARES = 8


def spare_ceiling(floor: int, cpus: int | None = None) -> int:
    """The most spares a pool of ``floor`` spares may grow to on a host of ``cpus`` cores."""
    cores = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(floor, min(MOST_SPARES, cores // 2))


class SpareSizer:
    """Records workers' start seconds and candidate jobs' seconds; ``wanted()`` is the spare count."""

    def __init__(self, floor: int, ceiling: int) -> None:
        self.floor, self.ceiling = max(0, floor), max(0, floor, ceiling)
        self._starts: deque[float] = deque(maxlen=WINDOW)
        self._jobs: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()

    def started(self, seconds: float) -> None:
        """A worker took ``seconds`` from spawn to READY."""
        with self._lock:
            self._starts.append(max(0.0, seconds))

    def ran(self, seconds: float) -> None:
        """A candidate's job took ``seconds`` from handover to the worker's exit."""
        with self._lock:
            self._jobs.append(max(SHORTEST_JOB_S, seconds))

    def wanted(self) -> int:
        """``ceil(median start / median job)`` within [floor, ceiling]; the floor until both are known."""
        with self._lock:
            if self.floor == 0 or not self._starts or not self._jobs:
                return self.floor
            need = math.ceil(statistics.median(self._starts) / statistics.median(self._jobs))
        return max(self.floor, min(self.ceiling, need))
