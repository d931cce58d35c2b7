"""Playing a benchmark: one stored run per task, through the run service every face uses.

Each task's run id is written to the manifest before its run starts, so a kill loses nothing:
``play_benchmark`` on the same manifest skips done runs, resumes interrupted ones and starts the
rest. A task file that cannot be loaded is reported and skipped; a run that fails (the model
server went away, say) stops the benchmark, resumable. Progress lines carry an ETA.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.benchmark.manifest import Manifest, ManifestStore, PlannedTask
from kevin_agent.benchmark.metrics import TaskResult, task_result
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.events import EventSink, ignore_events
from kevin_agent.run_record import RunRecord
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService
from kevin_agent.store import RunStore

Say = Callable[[str], None]


@dataclass
class BenchOutcome:
    """What a played benchmark left: each task's result, and why it stopped early (if it did)."""

    results: list[TaskResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why" for tasks that could not load
    stopped: Optional[KevinError] = None
    cancelled: bool = False


def _stored(store: RunStore, run_id: Optional[str]) -> Optional[RunRecord]:
    if run_id is None:
        return None
    try:
        return store.load_run(store.resolve_run_id(run_id))
    except UserInputError:
        return None  # chosen, but killed before the run was created: start it under that id


def _request(manifest: Manifest, planned: PlannedTask, stored: Optional[RunRecord]) -> RunRequest:
    if stored is not None:
        return RunRequest(resume=stored.run_id)
    run = manifest.run
    flags = dict(run.get("backend_flags") or {})
    if planned.script:
        flags.update(backend="scripted", script=planned.script)
    return RunRequest(target=f"{planned.path}::Model",
                      trajectories=planned.trajectories or int(run["trajectories"]),
                      turns=int(run["turns"]), target_speedup=run.get("target_speedup"),
                      beam_keep=run.get("beam_keep"), beam_every=int(run.get("beam_every") or 1),
                      backend_flags=flags, eval_flags=dict(run.get("eval_flags") or {}),
                      evaluator=run.get("evaluator"), gpu_name=run.get("gpu_name"), run_id=planned.run_id)


class _Eta:
    """Remaining time from the mean duration of the tasks played in this process."""

    def __init__(self, total: int) -> None:
        self.total, self.played, self.seconds = total, 0, 0.0

    def add(self, seconds: float) -> None:
        self.played += 1
        self.seconds += seconds

    def text(self, left: int) -> str:
        if not self.played or not left:
            return ""
        minutes = self.seconds / self.played * left / 60
        return f"; ETA {minutes:.0f} min" if minutes >= 1 else "; ETA under a minute"


def _describe(result: TaskResult) -> str:
    if not result.correct:
        return f"no correct kernel in {result.candidates} candidates"
    return f"best {result.best_vs_eager:.2f}x vs eager, {result.best_vs_compile:.2f}x vs torch.compile"


def play_benchmark(service: RunService, manifest: Manifest, manifests: ManifestStore, say: Say,
                   cancel: Optional[threading.Event] = None, events: EventSink = ignore_events) -> BenchOutcome:
    """Play every task of ``manifest`` in order (see the module docstring)."""
    from kevin_agent.loop.session import new_run_id

    store, outcome, eta = service.store_for(), BenchOutcome(), _Eta(len(manifest.tasks))
    for index, planned in enumerate(manifest.tasks, start=1):
        head = f"[{index}/{len(manifest.tasks)}] {planned.name}"
        stored = _stored(store, planned.run_id)
        if stored is None or stored.status != "done":
            if cancel is not None and cancel.is_set():
                outcome.cancelled = True
                break
            if planned.run_id is None:
                planned.run_id = new_run_id()
                manifests.save(manifest)  # the id is known before the run exists: a kill loses nothing
            started = time.monotonic()
            try:
                played = service.open(_request(manifest, planned, stored), events).play(cancel)
            except UserInputError as err:
                outcome.skipped.append(f"{planned.name}: {err}")
                say(f"{head}: skipped: {err}")
                continue
            stored = played.record
            eta.add(time.monotonic() - started)
            if played.record.status == "cancelled":
                outcome.cancelled = True
            elif played.record.status == "failed":
                outcome.stopped = played.failure or KevinError(played.record.error or "the run failed")
        result = task_result(planned.name, planned.level, stored)
        outcome.results.append(result)
        if outcome.cancelled or outcome.stopped:
            break
        say(f"{head}: {_describe(result)}{eta.text(len(manifest.tasks) - index)}")
    return outcome


def results_of(service: RunService, manifest: Manifest) -> list[TaskResult]:
    """Every task's result as stored now (``missing`` for tasks not started)."""
    store = service.store_for()
    found = []
    for planned in manifest.tasks:
        stored = _stored(store, planned.run_id)
        found.append(task_result(planned.name, planned.level, stored) if stored is not None
                     else TaskResult(planned.name, planned.level))
    return found


def kevin_dir_of(service: RunService) -> Path:
    """The run store's folder (``.kevin``), where benchmark manifests live."""
    return service.store_for().path.parent
