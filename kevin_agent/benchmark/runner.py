"""Playing a benchmark: one stored run per task, several tasks at once, through one run service.

Up to ``parallel`` tasks play side by side, each its own Session and stored run, all against the
service's one evaluator (the tasks share their settings, so the service hands every run the same
evaluator): their candidates form one stream, so builds of different tasks overlap, each task's
baseline is measured while its candidates build, and the GPU stages follow each other.

Each task's run id is written to the manifest before its run starts, so a kill loses nothing:
``play_benchmark`` on the same manifest skips done runs, resumes interrupted ones and starts the
rest. A task file that cannot be loaded is skipped: kept apart in the manifest, never counted,
tried again on resume. A run that fails (the model server went away, settings that cannot work)
stops the benchmark: no task starts after it, the running ones are cancelled, all resumable.
Each finished task prints one line with an ETA (``eta.BenchEta``).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevin_agent.benchmark.eta import BenchEta
from kevin_agent.benchmark.manifest import Manifest, ManifestStore, PlannedTask
from kevin_agent.benchmark.metrics import TaskResult, task_result
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.events import Event, EventSink, VerdictReady, ignore_events
from kevin_agent.run_record import RunRecord
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService
from kevin_agent.store import RunStore

Say = Callable[[str], None]


@dataclass
class BenchOutcome:
    """What a played benchmark left: the tasks skipped, and why it stopped early (if it did)."""

    skipped: list[str] = field(default_factory=list)  # "name: why" for tasks that could not load
    stopped: Optional[KevinError] = None
    cancelled: bool = False
    played: int = 0  # runs that ended done in this process


def _stored(store: RunStore, run_id: Optional[str]) -> Optional[RunRecord]:
    if run_id is None:
        return None
    try:
        return store.load_run(store.resolve_run_id(run_id))
    except UserInputError:
        return None  # chosen, but killed before the run was created: start it under that id


def _request(manifest: Manifest, planned: PlannedTask, stored: Optional[RunRecord]) -> RunRequest:
    """The run of ``planned``: its stored run resumed, else a new one on its task, loaded here so
    that a task file that cannot be loaded (UserInputError) is told apart from settings that cannot."""
    if stored is not None:
        return RunRequest(resume=stored.run_id)
    from kevin_agent.evaluate.source.ast_lock import PARSE_LOCK
    from kevin_agent.task import load_task

    with PARSE_LOCK:  # loading parses, beside other tasks' static stages (ast_lock says why)
        task = load_task(f"{planned.path}::Model")
    return dataclasses.replace(_settings_request(manifest, planned), task=task, run_id=planned.run_id)


def check_settings(service: RunService, run: dict[str, Any], script: Optional[str]) -> None:
    """Bad input is told before any task starts: a ``--script`` that is missing or not a script,
    and run settings that cannot work (UserInputError, one line)."""
    if script:
        from kevin_agent.backends.scripted import load_script

        load_script(Path(script).expanduser())
    manifest = Manifest("check", "", [], dict(run))
    service.new_settings(_settings_request(manifest, PlannedTask("check", 0, "")))


def _settings_request(manifest: Manifest, planned: PlannedTask) -> RunRequest:
    """The request's run settings (no task yet): the benchmark's, with the task's own replies."""
    run = manifest.run
    flags = dict(run.get("backend_flags") or {})
    if planned.script:
        flags.update(backend="scripted", script=planned.script)
    return RunRequest(trajectories=planned.trajectories or int(run["trajectories"]),
                      turns=int(run["turns"]), target_speedup=run.get("target_speedup"),
                      beam_keep=run.get("beam_keep"), beam_every=int(run.get("beam_every") or 1),
                      backend_flags=flags, eval_flags=dict(run.get("eval_flags") or {}),
                      evaluator=run.get("evaluator"), gpu_name=run.get("gpu_name"))


def _expected(manifest: Manifest, planned: PlannedTask, stored: Optional[RunRecord]) -> int:
    """Candidates the task's run may still judge: trajectories x turns, less those it stored."""
    planned_count = (planned.trajectories or int(manifest.run["trajectories"])) * int(manifest.run["turns"])
    judged = sum(verdict is not None for _, verdict in stored.candidates) if stored is not None else 0
    return planned_count - judged


def _describe(result: TaskResult) -> str:
    if not result.correct:
        return f"no correct kernel in {result.candidates} candidates"
    return f"best {result.best_vs_eager:.2f}x vs eager, {result.best_vs_compile:.2f}x vs torch.compile"


class _Play:
    """One play's shared state, as the task threads report to it (manifest writes under one lock).
    ``halt``: no task starts after it is set, and the running ones cancel."""

    def __init__(self, service: RunService, manifest: Manifest, manifests: ManifestStore, say: Say,
                 events: EventSink, eta: BenchEta, done: int) -> None:
        self.service, self.manifest, self.manifests, self.say = service, manifest, manifests, say
        self.events, self.eta, self.done = events, eta, done
        self.halt = threading.Event()
        self.outcome = BenchOutcome()
        self._lock = threading.Lock()

    def choose_run_id(self, planned: PlannedTask) -> None:
        """Its run id, written down before the run exists (unique in the benchmark: tasks that
        start in the same second must not share one)."""
        from kevin_agent.loop.session import new_run_id

        with self._lock:
            planned.skipped = None
            taken = {task.run_id for task in self.manifest.tasks}
            while planned.run_id is None:
                chosen = new_run_id()
                planned.run_id = None if chosen in taken else chosen
            self.manifests.save(self.manifest)

    def skip(self, index: int, planned: PlannedTask, err: UserInputError) -> None:
        with self._lock:
            planned.skipped, planned.run_id = str(err), None
            self.manifests.save(self.manifest)
            self.outcome.skipped.append(f"{planned.name}: {err}")
            self.eta.finished(index)
            self.done += 1
            self.say(f"[{self.done}/{len(self.manifest.tasks)}] {planned.name}: skipped (not counted): {err}")

    def stop(self, error: KevinError) -> None:
        """A run failed: the first failure is the benchmark's; nothing new starts."""
        with self._lock:
            self.outcome.stopped = self.outcome.stopped or error
        self.halt.set()

    def finished(self, index: int, planned: PlannedTask, record: RunRecord) -> None:
        self.eta.finished(index)
        if record.status != "done":
            return
        result = task_result(planned.name, planned.level, record)
        with self._lock:
            self.done += 1
            self.outcome.played += 1
            self.say(f"[{self.done}/{len(self.manifest.tasks)}] {planned.name}: {_describe(result)}{self.eta.text()}")

    def sink(self, index: int) -> EventSink:
        """The task's events: counted for the ETA, then passed on."""
        def on_event(event: Event) -> None:
            if isinstance(event, VerdictReady):
                self.eta.judged_one(index)
            self.events(event)

        return on_event


def _play_task(play: _Play, index: int, planned: PlannedTask, stored: Optional[RunRecord]) -> None:
    """Open and play one task's run (see the module docstring for what stops what)."""
    if play.halt.is_set():
        return
    play.choose_run_id(planned)
    try:
        request = _request(play.manifest, planned, stored)
    except UserInputError as err:
        play.skip(index, planned, err)
        return
    try:
        prepared = play.service.open(request, play.sink(index))
    except KevinError as err:  # settings, backend or evaluator: every task would fail the same way
        play.stop(err)
        return
    played = prepared.play(play.halt)
    if played.record.status == "failed":
        play.stop(played.failure or KevinError(played.record.error or "the run failed"))
    play.finished(index, planned, played.record)


def _run_bounded(jobs: Sequence[Callable[[], None]], parallel: int, cancel: Optional[threading.Event],
                 play: _Play) -> None:
    """Run ``jobs`` on at most ``parallel`` daemon threads (a second Ctrl-C must not wait for
    them); a cancel halts the play. An unexpected error halts it too and is raised here."""
    pending: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    for job in jobs:
        pending.put(job)
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                job()
            except BaseException as err:  # a bug: the benchmark stops and the error surfaces
                errors.append(err)
                play.halt.set()

    threads = [threading.Thread(target=work, name=f"kevin-bench-{n}", daemon=True)
               for n in range(max(1, min(parallel, len(jobs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.1)
            if cancel is not None and cancel.is_set() and not play.halt.is_set():
                play.outcome.cancelled = True
                play.halt.set()
    if errors:
        raise errors[0]


def play_benchmark(service: RunService, manifest: Manifest, manifests: ManifestStore, say: Say,
                   cancel: Optional[threading.Event] = None, events: EventSink = ignore_events,
                   parallel: int = 1) -> BenchOutcome:
    """Play every task of ``manifest`` not done yet, ``parallel`` at once (the module docstring)."""
    store = service.store_for()
    stored = [_stored(store, planned.run_id) for planned in manifest.tasks]
    todo = [i for i, record in enumerate(stored) if record is None or record.status != "done"]
    eta = BenchEta({i: _expected(manifest, manifest.tasks[i], stored[i]) for i in todo})
    play = _Play(service, manifest, manifests, say, events, eta, done=len(manifest.tasks) - len(todo))
    if cancel is not None and cancel.is_set():
        play.outcome.cancelled = True
        play.halt.set()
    jobs = [_job(play, i, manifest.tasks[i], stored[i]) for i in todo]
    _run_bounded(jobs, parallel, cancel, play)
    return play.outcome


def _job(play: _Play, index: int, planned: PlannedTask, stored: Optional[RunRecord]) -> Callable[[], None]:
    return lambda: _play_task(play, index, planned, stored)


def results_of(service: RunService, manifest: Manifest) -> list[TaskResult]:
    """Every counted task's result as stored now (``missing`` for tasks not started); skipped
    tasks are not among them (``skipped_of``)."""
    store = service.store_for()
    found = []
    for planned in manifest.tasks:
        if planned.skipped is not None:
            continue
        stored = _stored(store, planned.run_id)
        found.append(task_result(planned.name, planned.level, stored) if stored is not None
                     else TaskResult(planned.name, planned.level))
    return found


def skipped_of(manifest: Manifest) -> list[dict[str, object]]:
    """The tasks kept apart: name, level, why."""
    return [{"name": p.name, "level": p.level, "why": p.skipped} for p in manifest.tasks if p.skipped is not None]


def kevin_dir_of(service: RunService) -> Path:
    """The run store's folder (``.kevin``), where benchmark manifests live."""
    return service.store_for().path.parent
