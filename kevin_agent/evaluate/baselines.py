"""Baselines measured once: eager and torch.compile timings of a task's reference, per task,
GPU model and settings, kept in memory for a run and on disk across runs.

The key covers the task source (its shapes and dtypes come from its ``get_inputs``), the GPU
model, the torch version and the settings that change a measurement. A stored baseline also
records the input signature it was measured on, shown with the verdicts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.atomic import write_text_atomically
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import Baseline

DRIFT_NOTE_PERCENT = 5.0  # a re-measured baseline this far off its first measurement is worth a note


def baseline_key(task_source: str, gpu_name: str, torch_version: str, settings: EvalSettings) -> str:
    payload = {
        "task": task_source, "gpu": gpu_name, "torch": torch_version, "trials": settings.timing_trials,
        "warmup": settings.warmup_trials, "torch_compile": settings.with_torch_compile,
        "seed": settings.seed, "recipe": "kevin-baseline-1",
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
    """Baselines by key: memory first, then ``folder`` on disk; one measurement per key at a time."""

    def __init__(self, folder: Optional[Path]) -> None:
        self.folder = folder
        self._known: dict[str, Baseline] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get_or_measure(self, key: str, measure: Callable[[], Optional[Baseline]]) -> tuple[Optional[Baseline], bool]:
        """(baseline, was it cached); ``measure`` runs at most once per key at a time."""
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            known = self._known.get(key) or self._read(key)
            if known is not None:
                self._known[key] = known
                return known, True
            measured = measure()
            if measured is not None:
                self.put(key, measured)
            return measured, False

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
