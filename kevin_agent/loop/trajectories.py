"""Trajectory bookkeeping for the session: histories, beam forking, and rebuilding from the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from kevin_agent.data import Candidate, Verdict
from kevin_agent.run_record import RunRecord


def candidate_id(trajectory: int, turn: int) -> str:
    return f"t{trajectory}.{turn}"


@dataclass
class Trajectory:
    """One trajectory: the (candidate, verdict) history its next prompt is built from."""

    index: int
    history: list[tuple[Candidate, Verdict]] = field(default_factory=list)

    @property
    def best_speedup(self) -> float:
        """Speedup of the fastest candidate that counts as best in this history, 0 if none."""
        return max((v.speedup for _, v in self.history if v.counts_as_best), default=0.0)

    @property
    def last_id(self) -> Optional[str]:
        return self.history[-1][0].id if self.history else None


def best_of(lanes: list[Trajectory]) -> float:
    return max((lane.best_speedup for lane in lanes), default=0.0)


def fork_beam(lanes: list[Trajectory], keep: int) -> list[Trajectory]:
    """Keep the ``keep`` fastest trajectories (ties: lower index) and copy each len/keep times."""
    ranked = sorted(lanes, key=lambda lane: (-lane.best_speedup, lane.index))[:keep]
    copies = len(lanes) // keep
    return [
        Trajectory(index=i, history=list(ranked[i // copies].history)) for i in range(len(lanes))
    ]


def beam_due(settings: Any, turn: int) -> bool:
    """Whether a beam selection follows ``turn`` (never after the last turn)."""
    if not settings.beam_keep or turn >= settings.turns - 1:
        return False
    return (turn + 1) % settings.beam_every == 0


@dataclass
class ResumePoint:
    """Where a stored run continues: lanes after the finished turns, and the partial turn."""

    lanes: list[Trajectory]
    turn: int  # the first turn not finished by every trajectory (== turns when all done)
    partial: dict[int, tuple[Candidate, Optional[Verdict]]]  # lane index -> stored work of ``turn``
    best: float


def resume_point(record: RunRecord, settings: Any) -> ResumePoint:
    """Replay the stored turns: finished turns are kept, the first unfinished one is redone."""
    by_id = {c.id: (c, v) for c, v in record.candidates}
    lanes = [Trajectory(index=i) for i in range(settings.trajectories)]
    for turn in range(settings.turns):
        entries = {i: by_id.get(candidate_id(i, turn)) for i in range(settings.trajectories)}
        finished = all(e is not None and e[1] is not None for e in entries.values())
        if not finished:
            partial = {i: e for i, e in entries.items() if e is not None}
            return ResumePoint(lanes, turn, partial, best_of(lanes))
        for i, entry in entries.items():
            assert entry is not None and entry[1] is not None
            lanes[i].history.append((entry[0], entry[1]))
        if beam_due(settings, turn):
            lanes = fork_beam(lanes, settings.beam_keep)
    return ResumePoint(lanes, settings.turns, {}, best_of(lanes))
