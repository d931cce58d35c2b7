"""The evaluator's pipeline: one batch of candidates flows static -> compile -> GPU lanes.

Compiles run in a pool of threads (each a ninja build); every compiled candidate joins one
queue that every lane's thread takes from, so the GPUs stay busy while compiles go on and several
batches (runs, editor classes) share the lanes. A ``Batch`` collects its verdicts in order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.evaluate.api import QueueCallback, VerdictCallback, WaitCallback
from kevin_agent.evaluate.lanes import GpuLane
from kevin_agent.evaluate.verdicts import cancelled_verdict


@dataclass(frozen=True)
class Target:
    """What an evaluator's environment check found: the architecture to build for, the GPU model
    verdicts name, how many compiles may run at once (None: as configured) and the lanes it
    opened on the way (a cluster's: their GPUs tell the architecture)."""

    arch: Optional[str]
    gpu_name: Optional[str] = None
    jobs: Optional[int] = None
    lanes: Sequence[GpuLane] = ()


@dataclass
class GpuItem:
    """One compiled candidate waiting for a lane; or, with ``baseline_only``, its batch's task
    baseline, queued when the batch starts so that a lane measures it while the builds compile
    (no candidate, no verdict, not counted in the batch's queue sizes)."""

    batch: Batch
    index: int
    code: str
    build: VerdictDetails
    entries: Sequence[Path] = ()  # the build cache entries of its extensions
    baseline_only: bool = False

    @classmethod
    def baseline_for(cls, batch: Batch) -> GpuItem:
        return cls(batch, -1, "", VerdictDetails(), baseline_only=True)

    def left_lanes(self) -> None:
        """It left the lanes for good (run, failed or dropped): its batch counts one fewer on the
        GPU (a baseline job was never counted there)."""
        if not self.baseline_only:
            self.batch.count(on_gpu=-1)


class Batch:
    """One ``evaluate`` call: its verdicts, its queue counts, and how it ends."""

    def __init__(self, task: Task, codes: Sequence[str], cancel: threading.Event,
                 on_verdict: Optional[VerdictCallback], on_queue: Optional[QueueCallback],
                 on_wait: Optional[WaitCallback]) -> None:
        self.task, self.codes, self.cancel = task, codes, cancel
        self.on_wait = on_wait
        self._on_verdict, self._on_queue = on_verdict, on_queue
        self.verdicts: list[Optional[Verdict]] = [None] * len(codes)
        self.reached = [Stage.FORMAT] * len(codes)
        self.compiling = 0
        self.on_gpu = 0
        self.error: Optional[BaseException] = None
        self._pending = len(codes)
        self._lock = threading.Lock()
        self.finished = threading.Event()
        if not codes:
            self.finished.set()

    def settle(self, index: int, verdict: Verdict) -> None:
        with self._lock:
            if self.verdicts[index] is not None:
                return
            self.verdicts[index] = verdict
            self._pending -= 1
            done = self._pending == 0
        if self._on_verdict is not None:
            self._on_verdict(index, verdict)
        if done:
            self.finished.set()

    def count(self, compiling: int = 0, on_gpu: int = 0) -> None:
        """Move candidates between the compile and GPU queues; report the sizes."""
        with self._lock:
            self.compiling += compiling
            self.on_gpu += on_gpu
            sizes = (self.compiling, self.on_gpu)
        if self._on_queue is not None:
            self._on_queue(*sizes)

    def fail(self, error: BaseException) -> None:
        """End the batch with an error ``evaluate`` raises (the task itself fails, no GPU...)."""
        with self._lock:
            self.error = self.error or error
        self.finished.set()

    def wait(self) -> list[Verdict]:
        """Block until every candidate is judged, the batch failed, or it was cancelled."""
        while not self.finished.wait(0.05):
            if self.cancel.is_set():
                break
        if self.error is not None:
            raise self.error
        return [v if v is not None else cancelled_verdict(self.reached[i]) for i, v in enumerate(self.verdicts)]


class LaneQueue:
    """Compiled candidates waiting for any lane (FIFO across batches); ``stop`` ends the lanes'
    threads (one ``None`` each) and marks it ``stopped``."""

    def __init__(self) -> None:
        self._items: queue.Queue[Optional[GpuItem]] = queue.Queue()
        self._stopped = threading.Event()

    def put(self, item: GpuItem) -> None:
        self._items.put(item)

    def get(self) -> Optional[GpuItem]:
        return self._items.get()

    def get_nowait(self) -> Optional[GpuItem]:
        """The next item; ``queue.Empty`` at once when there is none."""
        return self._items.get_nowait()

    def empty(self) -> bool:
        return self._items.empty()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self, lanes: int) -> None:
        self._stopped.set()
        for _ in range(lanes):
            self._items.put(None)
