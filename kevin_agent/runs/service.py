"""``RunService``: the one place a run is set up, played and closed, for every face.

Given a ``RunRequest`` (a new run, or a stored run to resume) it resolves settings (flags >
environment > config file > defaults), opens the backend, the evaluator and the store, builds the
``Session`` and hands back a ``PreparedRun`` whose ``play`` drives it. Backends, evaluators and
stores are kept for the service's lifetime (a language server plays many runs on one warm
evaluator) and closed by ``close``. Faces only turn input into a request and events into display.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent.backends.base import Backend
from kevin_agent.config import BackendSettings, KevinConfig, load_config, resolve_backend_settings
from kevin_agent.data import Task
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.evaluate.api import EVALUATOR_ENV, EvalSettings, Evaluator
from kevin_agent.events import EventSink, ignore_events
from kevin_agent.loop.session import Session
from kevin_agent.loop.settings import RunSettings
from kevin_agent.run_record import RunRecord
from kevin_agent.runs.locks import RunLock
from kevin_agent.runs.request import RunRequest
from kevin_agent.store import RunStore

EXIT_CANCELLED = 130

BackendFactory = Callable[[BackendSettings], Backend]
EvaluatorFactory = Callable[[Optional[str], EvalSettings], Evaluator]
StoreOpener = Callable[[Path], RunStore]


def _make_backend(settings: BackendSettings) -> Backend:
    from kevin_agent.backends import make_backend

    return make_backend(settings)


def _absolute_spec(spec: Optional[str]) -> Optional[str]:
    """``replay:FILE`` with FILE made absolute, so the stored run resumes from any folder."""
    if spec and spec.startswith("replay:"):
        return "replay:" + str(Path(spec.removeprefix("replay:")).expanduser().resolve())
    return spec


def fresh_run_ids(count: int) -> list[str]:
    """``count`` new run ids, no two alike (runs opened in the same second would share one)."""
    from kevin_agent.loop.session import new_run_id

    chosen: list[str] = []
    while len(chosen) < count:
        run_id = new_run_id()
        if run_id not in chosen:
            chosen.append(run_id)
    return chosen


def _open_evaluator(spec: Optional[str], settings: EvalSettings) -> Evaluator:
    from kevin_agent.evaluate.evaluator import open_evaluator

    return open_evaluator(spec, settings)


def _with_flags(settings: EvalSettings, flags: Mapping[str, Any]) -> EvalSettings:
    from kevin_agent.config import resolve_eval_settings

    return dataclasses.replace(settings, **resolve_eval_settings(flags))


@dataclass
class RunOutcome:
    """How a played run ended: the stored record and, when it failed, why."""

    record: RunRecord
    failure: Optional[KevinError] = None

    @property
    def exit_code(self) -> int:
        """0 done, 130 cancelled, the failure's own code (else 1) when it failed."""
        if self.record.status == "cancelled":
            return EXIT_CANCELLED
        if self.record.status == "failed":
            return getattr(self.failure, "exit_code", 1) or 1
        return 0


class PreparedRun:
    """A session ready to play; its backend, evaluator and store belong to the service."""

    def __init__(self, session: Session, lock: RunLock) -> None:
        self.session = session
        self._lock = lock

    @property
    def run_id(self) -> str:
        return self.session.run_id

    @property
    def settings(self) -> RunSettings:
        return self.session.settings

    @property
    def task(self) -> Task:
        return self.session.task

    def abandon(self) -> None:
        """Mark the run cancelled now, while ``play`` may still be going on another thread (the
        process is quitting: a second Ctrl-C); its stored work stays, ready for ``--resume``."""
        self.session.store.set_status(self.run_id, "cancelled")

    def release(self) -> None:
        """Give up a run that will not be played (a batch whose next run could not open): its lock
        goes; nothing was stored for it."""
        self._lock.release()

    def play(self, cancel: Optional[threading.Event] = None) -> RunOutcome:
        """Run to the end (or cancel); events go to the request's sink. Never raises for a
        backend or evaluator failure: the outcome says it."""
        try:
            record = self.session.run(cancel)
        finally:
            self._lock.release()
        return RunOutcome(record, self.session.failure)


class RunService:
    """Opens what runs need and closes it all; thread-safe. Dependencies can be injected."""

    def __init__(
        self,
        *,
        environ: Optional[Mapping[str, str]] = None,
        make_backend: Optional[BackendFactory] = None,
        make_evaluator: Optional[EvaluatorFactory] = None,
        open_store: Optional[StoreOpener] = None,
        evaluator: Optional[Evaluator] = None,
        store: Optional[RunStore] = None,
    ) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self._make_backend = make_backend or _make_backend
        self._make_evaluator = make_evaluator or _open_evaluator
        self._open_store = open_store or RunStore.for_path
        self._shared_evaluator = evaluator  # given by the caller: used, never closed here
        self._fixed_store = store
        self._lock = threading.RLock()
        self._stores: dict[Path, RunStore] = {}
        self._backends: list[tuple[BackendSettings, Backend]] = []
        self._evaluators: dict[tuple[Optional[str], EvalSettings], Evaluator] = {}

    # -- what a run is made of ---------------------------------------------------------------

    def store_for(self, folder: Optional[Path] = None) -> RunStore:
        """The run store for ``folder`` (the repository above it; default: the current folder)."""
        if self._fixed_store is not None:
            return self._fixed_store
        key = Path(folder or Path.cwd()).resolve()
        with self._lock:
            if key not in self._stores:
                self._stores[key] = self._open_store(key)
            return self._stores[key]

    def backend_settings(self, flags: Mapping[str, Any], folder: Optional[Path],
                         config: Optional[KevinConfig] = None) -> BackendSettings:
        """Flags (None ignored) > environment > config file > defaults. ``config``: the file's
        table when the caller read it already (None: read it from ``folder`` now)."""
        return resolve_backend_settings(flags, self.environ, load_config(folder) if config is None else config)

    def backend(self, settings: BackendSettings) -> Backend:
        with self._lock:
            for known, backend in self._backends:
                if known == settings:
                    return backend
            backend = self._make_backend(settings)
            self._backends.append((settings, backend))
            return backend

    def evaluator(self, spec: Optional[str], settings: EvalSettings) -> Evaluator:
        """The evaluator for ``spec`` ("cuda", "replay:PATH"; None: $KEVIN_EVALUATOR or cuda)."""
        if self._shared_evaluator is not None:
            return self._shared_evaluator
        with self._lock:
            key = (spec, settings)
            if key not in self._evaluators:
                self._evaluators[key] = self._make_evaluator(spec, settings)
            return self._evaluators[key]

    def eval_settings(self, flags: Mapping[str, Any], folder: Optional[Path],
                      base: Optional[EvalSettings] = None, config: Optional[KevinConfig] = None) -> EvalSettings:
        """Policy, sandbox and cluster: flags > environment > config file > ``base``; each value
        parsed here, once (``config.resolve_eval_settings``). ``config`` as for backend_settings."""
        from kevin_agent.config import resolve_eval_settings

        table = load_config(folder) if config is None else config
        start = base if base is not None else EvalSettings()
        return dataclasses.replace(start, **resolve_eval_settings(flags, self.environ, table))

    def new_settings(self, request: RunRequest) -> RunSettings:
        """The settings of a new run (the config file read once); UserInputError naming the one
        that cannot work."""
        config = load_config(request.config_dir)
        settings = RunSettings(
            eval=self.eval_settings(request.eval_flags, request.config_dir, config=config),
            trajectories=request.trajectories, turns=request.turns,
            target_speedup=request.target_speedup, beam_keep=request.beam_keep,
            beam_every=request.beam_every,
            backend=self.backend_settings(request.backend_flags, request.config_dir, config),
            gpu_name=request.gpu_name,
            evaluator=_absolute_spec(request.evaluator or self.environ.get(EVALUATOR_ENV) or None),
        )
        settings.validate()
        return settings

    # -- opening and playing -----------------------------------------------------------------

    def open(self, request: RunRequest, events: EventSink = ignore_events) -> PreparedRun:
        """A session for the request, its run locked to this process; one-line errors."""
        store = self.store_for(request.config_dir)
        if request.resume:
            return self._open_resumed(request, store, events)
        if request.target and request.task:
            raise UserInputError("give either FILE.py::Class or a task, not both")
        task = request.task or self._load_task(request.target)
        settings = self.new_settings(request)
        backend = self.backend(settings.backend)
        evaluator = self.evaluator(settings.evaluator, settings.eval)
        session = Session(task, settings, backend, evaluator, store, events, request.run_id)
        return PreparedRun(session, RunLock.take(store, session.run_id))

    def _load_task(self, target: Optional[str]) -> Task:
        if not target:
            raise UserInputError("name a module to optimize: kevin optimize FILE.py::Class "
                                 "(or continue a run with --resume RUN)")
        from kevin_agent.task import load_task

        return load_task(target)

    def _open_resumed(self, request: RunRequest, store: RunStore, events: EventSink) -> PreparedRun:
        if request.target or request.task:
            raise UserInputError("give either FILE.py::Class or --resume RUN, not both")
        run_id = store.resolve_run_id(request.resume or "")
        lock = RunLock.take(store, run_id)
        try:
            record = store.load_run(run_id)  # read under the lock: its last holder may just have finished it
            if record.status == "done":
                raise UserInputError(f"run {run_id} is already done; `kevin show {run_id}`")
            settings = RunSettings.from_dict(record.settings)
            stored_backend = dict(record.settings.get("backend") or {})
            settings.backend = self.backend_settings({**stored_backend, **request.given_flags},
                                                     request.config_dir)
            settings.evaluator = _absolute_spec(request.evaluator) or settings.evaluator
            settings.eval = _with_flags(settings.eval, request.eval_flags)  # flags beat the stored ones
            backend = self.backend(settings.backend)
            evaluator = self.evaluator(settings.evaluator, settings.eval)
            session = Session.resumed(record, settings, backend, evaluator, store, events)
        except BaseException:
            lock.release()
            raise
        return PreparedRun(session, lock)

    def run(self, request: RunRequest, events: EventSink = ignore_events,
            cancel: Optional[threading.Event] = None) -> RunOutcome:
        """``open`` then ``play``."""
        return self.open(request, events).play(cancel)

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every evaluator (kills its workers), backend and store this service opened."""
        with self._lock:
            evaluators, self._evaluators = list(self._evaluators.values()), {}
            backends, self._backends = [b for _, b in self._backends], []
            stores, self._stores = list(self._stores.values()), {}
        for evaluator in evaluators:
            evaluator.close()
        for backend in backends:
            backend.close()
        for store in stores:
            store.close()

    def __enter__(self) -> RunService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
