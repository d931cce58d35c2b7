"""The run manager: one run per class at a time, runs of several classes queue for the GPU.

Runs play on one worker thread (the GPU is one queue), never on the server's event loop. The
manager only keeps state and calls back; turning state into LSP messages is the server's job.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from kevin_agent.data import Candidate, Task, Verdict
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.events import Event, RunDone, RunFailed, RunStarted, TurnDone, TurnStarted, VerdictReady

log = logging.getLogger(__name__)

ACTIVE = ("queued", "running")


@dataclass
class RunState:
    """What the editor shows about one class's run."""

    uri: str
    class_name: str
    task: Task
    trajectories: int
    turns: int
    status: str = "queued"  # queued | running | done | cancelled | failed | accepted | discarded
    run_id: Optional[str] = None
    turn: int = 0  # 0-based turn in play
    evaluated: int = 0  # candidates with a verdict
    best_speedup: float = 0.0
    best: Optional[tuple[Candidate, Verdict]] = None
    message: str = ""  # failure message
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> tuple[str, str]:
        return (self.uri, self.class_name)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def summary(self) -> str:
        """One line for a diagnostic, lens or progress report."""
        best = f", best {self.best_speedup:.2f}x vs eager" if self.best_speedup > 0 else ""
        if self.status == "queued":
            return "Kevin: queued for the GPU"
        if self.status == "running":
            return (f"Kevin: turn {self.turn + 1}/{self.turns}, {self.trajectories} trajectories, "
                    f"{self.evaluated} evaluated{best}")
        if self.status == "failed":
            return f"Kevin: run failed: {self.message}"
        if self.best is not None:
            verb = "cancelled" if self.status == "cancelled" else "done"
            return f"Kevin: {verb}, {self.best_speedup:.2f}x vs eager (accept, show diff or discard)"
        return f"Kevin: {self.status}, no correct kernel among {self.evaluated} candidates"


class SessionFactory(Protocol):
    def __call__(self, state: RunState, events: Callable[[Event], None]) -> Any:
        """A kevin_agent Session for the state's task (its ``run(cancel)`` plays the run)."""


class RunListener(Protocol):
    def on_change(self, state: RunState, event: Optional[Event]) -> None:
        """Called on the worker thread whenever the state changes (event None: status only)."""


class RunManager:
    """Queues runs, plays them one at a time, cancels them; thread-safe."""

    def __init__(self, make_session: SessionFactory, listener: RunListener) -> None:
        self._make_session = make_session
        self._listener = listener
        self._lock = threading.Lock()
        self._states: dict[tuple[str, str], RunState] = {}
        self._queue: "queue.Queue[Optional[RunState]]" = queue.Queue()
        self._worker: Optional[threading.Thread] = None

    # -- queries ---------------------------------------------------------------------------------

    def get(self, uri: str, class_name: str) -> Optional[RunState]:
        with self._lock:
            return self._states.get((uri, class_name))

    def for_uri(self, uri: str) -> list[RunState]:
        with self._lock:
            return [s for s in self._states.values() if s.uri == uri]

    def all(self) -> list[RunState]:
        with self._lock:
            return list(self._states.values())

    # -- gestures --------------------------------------------------------------------------------

    def submit(self, state: RunState) -> RunState:
        """Queue a run; UserInputError when this class already has one queued or running."""
        with self._lock:
            current = self._states.get(state.key)
            if current is not None and current.active:
                raise UserInputError(f"a Kevin run for {state.class_name} is already {current.status} "
                                     f"(cancel it with kevin.cancel)")
            self._states[state.key] = state
            self._ensure_worker()
        self._queue.put(state)
        self._listener.on_change(state, None)
        return state

    def cancel(self, uri: str, class_name: str) -> bool:
        """Stop the class's run (finished work is kept); False when nothing was going on."""
        with self._lock:
            state = self._states.get((uri, class_name))
            if state is None or not state.active:
                return False
            state.cancel.set()
            was_queued = state.status == "queued"
            if was_queued:
                state.status = "cancelled"
        if was_queued:
            self._listener.on_change(state, None)
        return True

    def forget(self, uri: str, class_name: str, status: str) -> Optional[RunState]:
        """Mark a finished run accepted / discarded and drop it from the editor's view."""
        with self._lock:
            state = self._states.get((uri, class_name))
            if state is None or state.active:
                return None
            state.status = status
            del self._states[(uri, class_name)]
        self._listener.on_change(state, None)
        return state

    def close(self) -> None:
        """Cancel everything and stop the worker (server shutdown)."""
        for state in self.all():
            state.cancel.set()
        self._queue.put(None)

    # -- the worker ------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="kevin-runs", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            state = self._queue.get()
            if state is None:
                return
            self._play(state)

    def _play(self, state: RunState) -> None:
        with self._lock:  # against cancel(): a queued run it cancelled must not start
            if state.cancel.is_set():
                return
            state.status = "running"
        self._listener.on_change(state, None)
        try:
            session = self._make_session(state, lambda event: self._on_event(state, event))
            state.run_id = session.run_id
            session.run(state.cancel)
        except KevinError as err:
            self._finish(state, RunFailed(state.run_id or "", str(err)))
        except Exception as err:  # the server outlives any bug in a run
            log.exception("run for %s crashed", state.class_name)
            self._finish(state, RunFailed(state.run_id or "", f"{type(err).__name__}: {err}"))
        if state.active:  # the session ended without RunDone / RunFailed
            self._finish(state, RunFailed(state.run_id or "", "the run stopped without a result"))

    def _finish(self, state: RunState, event: Event) -> None:
        if state.active:
            self._on_event(state, event)

    def _on_event(self, state: RunState, event: Event) -> None:
        if isinstance(event, RunStarted):
            state.run_id = event.run_id
        elif isinstance(event, TurnStarted):
            state.turn = event.turn
        elif isinstance(event, VerdictReady):
            state.evaluated += 1
            if event.verdict.counts_as_best and event.verdict.speedup > state.best_speedup:
                state.best_speedup = event.verdict.speedup
                state.best = (event.candidate, event.verdict)
        elif isinstance(event, TurnDone):
            state.best_speedup = max(state.best_speedup, event.best_speedup)
        elif isinstance(event, RunDone):
            state.status = "cancelled" if event.cancelled else "done"
            if event.best is not None and event.best_verdict is not None:
                state.best = (event.best, event.best_verdict)
                state.best_speedup = event.best_verdict.speedup
        elif isinstance(event, RunFailed):
            state.status, state.message = "failed", event.message
        self._listener.on_change(state, event)
