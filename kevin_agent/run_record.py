"""What a stored run looks like to its readers: ``RunRecord`` (one run) and ``RunSummary`` (a row)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from kevin_agent.data import Candidate, Task, Verdict
from kevin_agent.errors import UserInputError

RunStatus = Literal["running", "done", "cancelled", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "done", "cancelled", "failed")


def parse_run_status(value: object) -> RunStatus:
    """``value`` as a RunStatus (the store's column, read back); ValueError naming it."""
    for status in RUN_STATUSES:
        if value == status:
            return status
    raise ValueError(f"unknown run status {value!r} (expected one of {', '.join(RUN_STATUSES)})")


@dataclass
class RunSummary:
    """One line of ``kevin runs``."""

    run_id: str
    class_name: str
    created: str
    status: RunStatus
    best_speedup: Optional[float]  # best speedup vs eager (counts_as_best), None when none
    candidates: int = 0
    source_path: str = ""
    replayed: bool = False  # its verdicts were replayed from a recording (replay evaluator)


@dataclass
class RunRecord:
    """A run as stored: settings, task and every candidate with its verdict (None while in flight)."""

    run_id: str
    task: Task
    settings: dict[str, Any]
    status: RunStatus
    created: str
    candidates: list[tuple[Candidate, Optional[Verdict]]]
    updated: str = ""
    error: Optional[str] = None  # the one-line failure message of a failed run
    parents: dict[str, Optional[str]] = field(default_factory=dict)  # candidate id -> previous turn's
    notes: list[str] = field(default_factory=list)  # e.g. how far the baselines drifted by the end

    def best(self, gpu_name: Optional[str] = None) -> tuple[Candidate, Verdict] | None:
        """The fastest candidate that counts as best (correct, so trusted, and timed), among the
        verdicts measured on ``gpu_name`` (default: the run's main GPU model; speedups measured on
        different GPU models are never compared)."""
        wanted = gpu_name or self.gpu_name
        best: tuple[Candidate, Verdict] | None = None
        for candidate, verdict in self.candidates:
            if verdict is None or not verdict.counts_as_best:
                continue
            if wanted is not None and verdict.details.environment.gpu_name not in (wanted, None):
                continue
            if best is None or verdict.speedup > best[1].speedup:
                best = (candidate, verdict)
        return best

    def gpu_names(self) -> list[str]:
        """Every GPU model verdicts were measured on, the most used first."""
        counts: dict[str, int] = {}
        for _, verdict in self.candidates:
            if verdict is not None and verdict.details.environment.gpu_name:
                counts[verdict.details.environment.gpu_name] = counts.get(verdict.details.environment.gpu_name, 0) + 1
        return sorted(counts, key=lambda name: -counts[name])

    def best_by_gpu(self) -> dict[str, tuple[Candidate, Verdict]]:
        """The best candidate per GPU model (for runs spread over several models)."""
        found = {name: self.best(name) for name in self.gpu_names()}
        return {name: best for name, best in found.items() if best is not None}

    def best_speedup(self) -> float:
        found = self.best()
        return found[1].speedup if found else 0.0

    def candidate(self, candidate_id: str) -> tuple[Candidate, Optional[Verdict]]:
        for candidate, verdict in self.candidates:
            if candidate.id == candidate_id:
                return candidate, verdict
        known = ", ".join(c.id for c, _ in self.candidates[:12]) or "none"
        raise UserInputError(
            f"run {self.run_id} has no candidate {candidate_id!r} (candidates: {known}; "
            f"see `kevin show {self.run_id}`)"
        )

    def lineage(self, candidate_id: str) -> list[str]:
        """Candidate ids from turn 0 up to and including ``candidate_id`` (its history chain)."""
        chain: list[str] = []
        current: Optional[str] = candidate_id
        while current is not None and current not in chain:
            chain.append(current)
            current = self.parents.get(current)
        return list(reversed(chain))

    @property
    def gpu_name(self) -> Optional[str]:
        """The run's main GPU model: the one most verdicts were measured on."""
        names = self.gpu_names()
        return names[0] if names else None
