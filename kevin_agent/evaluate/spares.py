"""How many GPU workers a pool keeps starting ahead of its jobs.

A worker's start (spawn -> READY: Python, torch, a CUDA context, the profiler) takes seconds and
differs threefold between hosts of one cloud type (H100 hosts: 3.3 s and 11 s medians); a
candidate's job on the GPU takes about one. With ``n`` spares each has ``n`` jobs' time to start
before it is needed, so a pool keeps ``ceil(start / job)`` of them, between its floor (the
configured spares) and a ceiling (each spare holds a CUDA context and host memory). Until a job
was seen the job counts as ``EXPECTED_JOB_S``, so the first start seen already sizes the spares:
while a batch's first builds compile, not after its first candidates ran."""

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
# A candidate's job before any was seen: eval_bench's GPU stage median was 0.94 s and 1.04 s on
# two H100 hosts (bench/results, 2026-12-06 and -07), the p90 1.45 s.
EXPECTED_JOB_S = 1.0


def spare_ceiling(floor: int, cpus: int | None = None) -> int:
    """The most spares a pool of ``floor`` spares may grow to on a host of ``cpus`` cores."""
    cores = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(floor, min(MOST_SPARES, cores // 2))


class SpareSizer:
    """Records workers' start seconds and candidate jobs' seconds; ``wanted()`` is the spare count."""

    def __init__(self, floor: int, ceiling: int, expected_job_s: float | None = None) -> None:
        """``expected_job_s``: the job's seconds until one was seen (None: the floor until then)."""
        self.floor, self.ceiling = max(0, floor), max(0, floor, ceiling)
        self.expected_job_s = None if expected_job_s is None else max(SHORTEST_JOB_S, expected_job_s)
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
        """``ceil(median start / median job)`` within [floor, ceiling]; the floor until a start is
        known (and a job, without ``expected_job_s``)."""
        with self._lock:
            job = statistics.median(self._jobs) if self._jobs else self.expected_job_s
            if self.floor == 0 or not self._starts or job is None:
                return self.floor
            need = math.ceil(statistics.median(self._starts) / job)
        return max(self.floor, min(self.ceiling, need))
