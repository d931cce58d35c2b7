"""The run manager: one run per class at a time, runs of several classes queue for the GPU.

Runs play on one worker thread (the GPU is one queue), never on the server's event loop. The
manager only keeps state and calls back; turning state into LSP messages is the server's job.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from kevin_agent.data import Candidate, Task, Verdict
from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.events import Event, RunDone, RunFailed
from kevin_agent.run_table import plural, turn_label
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.state import RunView
from kevin_agent.verdict_text import is_replayed, untrusted_label

log = logging.getLogger(__name__)

ACTIVE = ("queued", "running")


@dataclass
class RunState:
    """What the editor shows about one class's run: its queue status and its ``RunView``."""

    uri: str
    class_name: str
    task: Task
    trajectories: int
    turns: int
    status: str = "queued"  # queued | running | done | cancelled | failed | accepted | discarded
    view: RunView = field(default_factory=RunView)
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> tuple[str, str]:
        return (self.uri, self.class_name)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def run_id(self) -> Optional[str]:
        return self.view.run_id or None

    @property
    def turn(self) -> int:
        return self.view.turn

    @property
    def evaluated(self) -> int:
        return self.view.evaluated

    @property
    def best_speedup(self) -> float:
        return self.view.best_speedup

    @property
    def best(self) -> Optional[tuple[Candidate, Verdict]]:
        return self.view.best

    @property
    def message(self) -> str:
        return self.view.message

    def request(self, backend_flags: dict[str, Any], eval_flags: dict[str, Any], folder: Path) -> RunRequest:
        """The run service request for this class's run (config looked up from ``folder``)."""
        return RunRequest(task=self.task, trajectories=self.trajectories, turns=self.turns,
                          backend_flags=backend_flags, eval_flags=eval_flags, config_dir=folder)

    def summary(self) -> str:
        """One line for a diagnostic, lens or progress report."""
        best = f", best {self.best_speedup:.2f}x vs eager" if self.best_speedup > 0 else ""
        if self.status == "queued":
            return "Kevin: queued for the GPU"
        if self.status == "running" and self.view.waiting:
            return f"Kevin: {self.view.waiting}"
        if self.status == "running":
            return (f"Kevin: turn {turn_label(self.turn, self.turns)}, "
                    f"{plural(self.trajectories, 'trajectory')}, {self.evaluated} evaluated{best}")
        if self.status == "failed":
            return f"Kevin: run failed: {self.message}"
        if self.best is not None:
            verb = "cancelled" if self.status == "cancelled" else "done"
            replayed = " (replayed, not measured here)" if is_replayed(self.best[1].details) else ""
            return f"Kevin: {verb}, {self.best_speedup:.2f}x vs eager{replayed} (accept, show diff or discard)"
        return (f"Kevin: {self.status}, no correct kernel among {plural(self.evaluated, 'candidate')}"
                + self.untrusted_note())

    def untrusted_note(self) -> str:
        """" (1 not trusted: faster than speed of light)": what matched but earned nothing."""
        labels = [label for _, v in self.view.rows.values() if v is not None and v.passed
                  and (label := untrusted_label(v, short=True))]
        if not labels:
            return ""
        reasons = "; ".join(dict.fromkeys(label.removeprefix("not trusted: ") for label in labels))
        return f" ({len(labels)} not trusted: {reasons})"


class RunOpener(Protocol):
    def __call__(self, state: RunState, events: Callable[[Event], None]) -> Any:
        """A prepared run for the state's task (``run_id``; ``play(cancel)`` plays it)."""


class RunListener(Protocol):
    def on_change(self, state: RunState, event: Optional[Event]) -> None:
        """Called on the worker thread whenever the state changes (event None: status only)."""


class RunManager:
    """Queues runs, plays them one at a time, cancels them; thread-safe."""

    def __init__(self, open_run: RunOpener, listener: RunListener) -> None:
        self._open_run = open_run
        self._listener = listener
        self._lock = threading.Lock()
        self._states: dict[tuple[str, str], RunState] = {}
        self._queue: queue.Queue[Optional[RunState]] = queue.Queue()
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

    def close(self, wait_s: float = 0.0) -> None:
        """Cancel everything and stop the worker (server shutdown), waiting up to ``wait_s``."""
        for state in self.all():
            state.cancel.set()
        self._queue.put(None)
        worker = self._worker
        if wait_s > 0 and worker is not None and worker is not threading.current_thread():
            worker.join(wait_s)

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
            prepared = self._open_run(state, lambda event: self._on_event(state, event))
            prepared.play(state.cancel)
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
        state.view.apply(event)
        if isinstance(event, (RunDone, RunFailed)):
            state.status = state.view.status
        self._listener.on_change(state, event)
