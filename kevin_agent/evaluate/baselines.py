"""Baselines measured once: eager and torch.compile timings of a task's reference, per task,
GPU model and settings, kept in memory for a run and on disk across runs.

The key covers the task source (its shapes and dtypes come from its ``get_inputs``), the GPU
model, the torch and CUDA versions and the settings that change a measurement (trials, warm-up,
torch.compile, seed; the policy does not: the reference's launch count is always measured). A
stored baseline also records the input signature it was measured on, shown with the verdicts.

Processes share the folder: the first to need a key measures it under a lock file, the others
wait on that lock (a ``Lease``: saying so, and who holds it, through ``on_wait``; a cancel ends
the wait) and read its result, so six ``kevin eval`` at
once measure a task once. ``fresh=True`` (``kevin eval --fresh-baselines``) measures each key
again once, then shares it. A measurement made ahead of the candidates (``claim=False``: while
their builds compile) is reported as measured, with its seconds, to the first caller that claims it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.atomic import write_text_atomically
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.lease import Lease
from kevin_agent.evaluate.protocol import Baseline

DRIFT_NOTE_PERCENT = 5.0  # a re-measured baseline this far off its first measurement is worth a note


def baseline_key(task_source: str, gpu_name: str, torch_version: str, settings: EvalSettings,
                 cuda_version: str = "") -> str:
    payload = {
        "task": task_source, "gpu": gpu_name, "torch": torch_version, "cuda": cuda_version,
        "trials": settings.timing_trials, "warmup": settings.warmup_trials,
        "torch_compile": settings.with_torch_compile, "seed": settings.seed, "recipe": "kevin-baseline-2",
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Drift:
    """A baseline measured again at the end of a run, against the one the run used."""

    gpu_name: str
    eager_percent: float
    compiled_percent: Optional[float]

    def text(self) -> str:
        parts = [f"eager {self.eager_percent:+.1f}%"]
        if self.compiled_percent is not None:
            parts.append(f"torch.compile {self.compiled_percent:+.1f}%")
        return f"baselines re-measured at the end on {self.gpu_name}: {', '.join(parts)}"


def drift(before: Baseline, after: Baseline) -> Drift:
    def percent(old: float, new: float) -> float:
        return 100.0 * (new - old) / old if old > 0 else 0.0

    compiled = None
    if before.compiled is not None and after.compiled is not None:
        compiled = percent(before.compiled.median_ms, after.compiled.median_ms)
    return Drift(after.gpu_name or before.gpu_name, percent(before.eager.median_ms, after.eager.median_ms),
                 compiled)


class BaselineBook:
    """Baselines by key: memory first, then ``folder`` on disk; one measurement per key at a time,
    across threads and (through a lock file per key) across processes."""

    def __init__(self, folder: Optional[Path], fresh: bool = False) -> None:
        self.folder = folder
        self.fresh = fresh  # ignore what is on disk until this book has measured the key itself
        self._known: dict[str, Baseline] = {}
        self._unclaimed: set[str] = set()  # measured ahead (claim=False), not yet reported to anyone
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get_or_measure(self, key: str, measure: Callable[[], Optional[Baseline]], *, claim: bool = True,
                       cancel: Optional[threading.Event] = None, on_wait: Optional[Callable[[str], None]] = None,
                       label: str = "the measurement of this task's baseline") -> tuple[Optional[Baseline], bool]:
        """(baseline, was it cached); ``measure`` runs at most once per key at a time. A measured
        baseline records how long its measurement took (``measured_seconds``). With ``claim=False``
        (a measurement ahead of the candidates) the first later caller that claims the key hears
        it as measured, not cached. While another process holds the key's lease (it is measuring),
        ``on_wait`` hears "waiting for LABEL, in use by kevin eval pid N" before this one waits;
        ``cancel`` set ends that wait with (None, False)."""
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            known = self._known.get(key)
            if known is not None:
                return known, not self._claimed(key, claim)
            with self._process_lease(key, label, cancel, on_wait) as held:
                if not held:
                    return None, False
                known = None if self.fresh else self._read(key)
                if known is not None:
                    self._known[key] = known
                    return known, True
                started = time.monotonic()
                measured = measure()
                if measured is not None:
                    measured.measured_seconds = round(time.monotonic() - started, 3)
                    self.put(key, measured)
                    if not claim:
                        self._unclaimed.add(key)
                return measured, False

    def knows(self, key: str) -> bool:
        """Whether the baseline of ``key`` is at hand without measuring it (in memory, or on disk
        unless this book measures afresh)."""
        return key in self._known or (not self.fresh and self._read(key) is not None)

    def _claimed(self, key: str, claim: bool) -> bool:
        """Whether this caller takes the report of a measurement made ahead (once per key)."""
        if claim and key in self._unclaimed:
            self._unclaimed.discard(key)
            return True
        return False

    @contextmanager
    def _process_lease(self, key: str, label: str, cancel: Optional[threading.Event],
                       on_wait: Optional[Callable[[str], None]]) -> Iterator[bool]:
        """The key's lease across processes, ``KEY.lock`` in the folder (always held without a folder)."""
        if self.folder is None:
            yield True
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with Lease(self.folder / f"{key}.lock", label).hold(cancel, on_wait) as held:
            yield held

    def put(self, key: str, baseline: Baseline) -> None:
        self._known[key] = baseline
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomically(self.folder / f"{key}.json", json.dumps(baseline.to_dict()))

    def _read(self, key: str) -> Optional[Baseline]:
        if self.folder is None:
            return None
        try:
            return Baseline.from_dict(json.loads((self.folder / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None
