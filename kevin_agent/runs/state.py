"""``RunView``: a run's events folded into what every face shows (one reducer for all three).

The CLI's live panel, the language server's progress and lenses, and the terminal UI's run
screen each keep a ``RunView`` and call ``apply`` for every event, then draw from its fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from kevin_agent.data import Candidate, Verdict
from kevin_agent.events import (
    CandidateGenerated,
    Event,
    GpuWaiting,
    ModelRetrying,
    QueueChanged,
    RunDone,
    RunFailed,
    RunStarted,
    TokensGenerated,
    TurnDone,
    TurnStarted,
    VerdictReady,
)
from kevin_agent.run_record import RunRecord
from kevin_agent.run_table import speedup_text
from kevin_agent.verdict_text import untrusted_label

ACTIVE_STATUSES = ("starting", "running")


def verdict_state(verdict: Verdict) -> str:
    """A trajectory's state after a verdict: its speedup, "not trusted: ...", or the stage it reached."""
    if verdict.counts_as_best:
        return speedup_text(verdict.speedup)
    untrusted = untrusted_label(verdict, short=True)
    if untrusted:
        return untrusted
    return f"{verdict.stage.value} {'ok' if verdict.ok else 'failed'}"


@dataclass
class RunView:
    """The display state of one run; ``apply`` is the only writer."""

    class_name: str = ""
    trajectories: int = 0
    turns: int = 0
    run_id: str = ""
    status: str = "starting"  # starting | running | done | cancelled | failed
    turn: int = 0  # the turn in play (0-based, like candidate ids)
    evaluated: int = 0  # candidates with a verdict
    best_speedup: float = 0.0
    best: Optional[tuple[Candidate, Verdict]] = None
    message: str = ""  # why the run failed
    rows: dict[str, tuple[Candidate, Optional[Verdict]]] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)  # this turn, per trajectory
    tokens_by_turn: dict[int, int] = field(default_factory=dict)
    trajectory_state: dict[int, str] = field(default_factory=dict)
    compiling: int = 0
    timing: int = 0
    waiting: str = ""  # why the GPU stage waits, while it does
    notes: tuple[str, ...] = ()  # what the run's end added (baseline drift)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @classmethod
    def from_record(cls, record: RunRecord) -> RunView:
        """The view of a stored run, as if its events had been applied."""
        view = cls(class_name=record.task.class_name, run_id=record.run_id, status=record.status,
                   trajectories=int(record.settings.get("trajectories") or 0),
                   turns=int(record.settings.get("turns") or 0), message=record.error or "",
                   notes=tuple(record.notes))
        for candidate, verdict in record.candidates:
            view.rows[candidate.id] = (candidate, verdict)
            view.turn = max(view.turn, candidate.turn)
            view.turns = max(view.turns, candidate.turn + 1)
            view.tokens_by_turn[candidate.turn] = view.tokens_by_turn.get(candidate.turn, 0) + candidate.tokens
            view.evaluated += verdict is not None
        best = record.best()
        if best is not None:
            view.best, view.best_speedup = (best[0], best[1]), best[1].speedup
        return view

    def apply(self, event: Event) -> None:
        """Fold one event in."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _started(self, event: RunStarted) -> None:
        self.run_id, self.class_name, self.status = event.run_id, event.class_name, "running"
        self.trajectories, self.turns = event.trajectories, event.turns
        self.trajectory_state = {i: "waiting" for i in range(event.trajectories)}

    def _turn_started(self, event: TurnStarted) -> None:
        self.turn = event.turn
        self.tokens = {}
        self.trajectory_state = {i: "generating" for i in self.trajectory_state}

    def _tokens(self, event: TokensGenerated) -> None:
        self.tokens.update(event.tokens_by_trajectory)
        self.tokens_by_turn[event.turn] = sum(self.tokens.values())

    def _generated(self, event: CandidateGenerated) -> None:
        candidate = event.candidate
        self.waiting = ""  # a reply came: no longer waiting for the model server
        self.tokens[candidate.trajectory] = candidate.tokens
        self.tokens_by_turn[candidate.turn] = sum(self.tokens.values())
        self.trajectory_state[candidate.trajectory] = (
            "format error" if candidate.parse_error else "evaluating")
        previous = self.rows.get(candidate.id, (candidate, None))[1]
        self.rows[candidate.id] = (candidate, previous)

    def _queue(self, event: QueueChanged) -> None:
        self.compiling, self.timing = event.compiling, event.timing

    def _waiting(self, event: GpuWaiting | ModelRetrying) -> None:
        self.waiting = event.message

    def _verdict(self, event: VerdictReady) -> None:
        candidate, verdict = event.candidate, event.verdict
        self.evaluated += 1
        self.waiting = ""
        self.rows[candidate.id] = (candidate, verdict)
        self.trajectory_state[candidate.trajectory] = verdict_state(verdict)
        if verdict.counts_as_best and verdict.speedup > self.best_speedup:
            self.best_speedup, self.best = verdict.speedup, (candidate, verdict)

    def _turn_done(self, event: TurnDone) -> None:
        self.best_speedup = max(self.best_speedup, event.best_speedup)

    def _done(self, event: RunDone) -> None:
        self.status = "cancelled" if event.cancelled else "done"
        self.compiling = self.timing = 0
        self.waiting, self.notes = "", event.notes
        if event.best is not None and event.best_verdict is not None:
            self.best = (event.best, event.best_verdict)
            self.best_speedup = event.best_verdict.speedup

    def _failed(self, event: RunFailed) -> None:
        self.status, self.message = "failed", event.message


# Each handler takes its own event type; the lookup by type(event) keeps them matched.
_HANDLERS: dict[type, Callable[[RunView, Any], None]] = {
    RunStarted: RunView._started,
    TurnStarted: RunView._turn_started,
    TokensGenerated: RunView._tokens,
    CandidateGenerated: RunView._generated,
    QueueChanged: RunView._queue,
    GpuWaiting: RunView._waiting,
    ModelRetrying: RunView._waiting,
    VerdictReady: RunView._verdict,
    TurnDone: RunView._turn_done,
    RunDone: RunView._done,
    RunFailed: RunView._failed,
}
