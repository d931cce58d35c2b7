"""UI-neutral events the core emits; every face (CLI, LSP, TUI) renders them its own way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Union

from kevin_agent.data import Candidate, Verdict


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    class_name: str
    trajectories: int
    turns: int


@dataclass(frozen=True)
class TurnStarted:
    run_id: str
    turn: int


@dataclass(frozen=True)
class TokensGenerated:
    """Streaming progress: total tokens generated so far in this turn, per trajectory."""

    run_id: str
    turn: int
    tokens_by_trajectory: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CandidateGenerated:
    run_id: str
    candidate: Candidate


@dataclass(frozen=True)
class QueueChanged:
    """How many candidates wait to compile and to be timed on the GPU."""

    run_id: str
    compiling: int
    timing: int


@dataclass(frozen=True)
class GpuWaiting:
    """The GPU stage waits: another process holds the GPU (its lease)."""

    run_id: str
    message: str  # "waiting for GPU 0, in use by kevin lsp pid 4242"


@dataclass(frozen=True)
class ModelRetrying:
    """A request to the model server failed and will be retried (one event per retry round)."""

    run_id: str
    message: str  # "model server: cannot reach http://...: ...; retry 1 of 4 in 1 s"


@dataclass(frozen=True)
class VerdictReady:
    run_id: str
    candidate: Candidate
    verdict: Verdict


@dataclass(frozen=True)
class TurnDone:
    run_id: str
    turn: int
    best_speedup: float  # best speedup vs eager so far, 0 when nothing correct yet


@dataclass(frozen=True)
class RunDone:
    run_id: str
    best: Candidate | None
    best_verdict: Verdict | None
    cancelled: bool = False
    notes: tuple[str, ...] = ()  # e.g. how far the baselines drifted by the end of the run


@dataclass(frozen=True)
class RunFailed:
    run_id: str
    message: str  # one line for the user


Event = Union[
    RunStarted,
    TurnStarted,
    TokensGenerated,
    CandidateGenerated,
    QueueChanged,
    GpuWaiting,
    ModelRetrying,
    VerdictReady,
    TurnDone,
    RunDone,
    RunFailed,
]
EventSink = Callable[[Event], None]


def ignore_events(event: Event) -> None:
    """An EventSink that drops everything."""
