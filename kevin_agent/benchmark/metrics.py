"""The benchmark table: per-task results from stored runs, then per-level and overall figures.

Definitions (Kevin's paper and KernelBench): a kernel counts when it is correct, timed and trusted
(``Verdict.counts_as_best``: untrusted verdicts earn nothing). A trajectory's speedup is that of its
fastest counting kernel, 0 when none; ``best@k`` averages over tasks the best trajectory's speedup,
``avg@k`` the mean trajectory's. ``fast_p`` is the share of tasks with a counting kernel strictly
faster than the baseline by ``p`` (vs eager, and vs torch.compile). The geometric mean is over the
tasks that have a counting kernel. Shares of compile errors and provenance rejections are over all
evaluated candidates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from kevin_agent.data import Stage, Verdict
from kevin_agent.run_record import RunRecord

FAST_THRESHOLDS = (0.0, 1.0, 1.5)


def counts(verdict: Optional[Verdict]) -> bool:
    """Correct, timed and trusted: the only verdicts a benchmark credits."""
    return verdict is not None and verdict.counts_as_best


@dataclass
class TaskResult:
    """One task's outcome in a benchmark (from its stored run; ``status`` "missing" when none)."""

    name: str
    level: int
    run_id: Optional[str] = None
    status: str = "missing"
    candidates: int = 0
    compile_errors: int = 0
    provenance_rejections: int = 0
    untrusted: int = 0
    correct: bool = False
    best_vs_eager: float = 0.0  # fastest counting kernel; 0 when none
    best_vs_compile: float = 0.0
    trajectory_best: list[float] = field(default_factory=list)  # per trajectory, vs eager, 0 when none
    replayed: bool = False  # its verdicts were recorded elsewhere and replayed
    gpu_name: Optional[str] = None  # the GPU model its verdicts were measured on
    policy: Optional[str] = None  # the provenance policy its run was judged under (None: no run)


def _failed_at(verdict: Verdict, stage: Stage) -> bool:
    return verdict.stage is stage and not verdict.ok


def task_result(name: str, level: int, record: RunRecord) -> TaskResult:
    """The figures of one stored run."""
    result = TaskResult(name, level, record.run_id, record.status, gpu_name=record.gpu_name,
                        policy=(record.settings.get("eval") or {}).get("policy"))
    per_trajectory: dict[int, float] = {}
    for candidate, verdict in record.candidates:
        per_trajectory.setdefault(candidate.trajectory, 0.0)
        if verdict is None or verdict.details.error == "cancelled":
            continue
        result.candidates += 1
        result.compile_errors += _failed_at(verdict, Stage.COMPILE)
        result.provenance_rejections += _failed_at(verdict, Stage.PROVENANCE)
        result.untrusted += verdict.passed and not verdict.trusted
        result.replayed = result.replayed or verdict.details.environment.replayed
        if not counts(verdict):
            continue
        result.correct = True
        eager = verdict.details.timing.speedup_vs_eager or 0.0
        per_trajectory[candidate.trajectory] = max(per_trajectory[candidate.trajectory], eager)
        result.best_vs_eager = max(result.best_vs_eager, eager)
        result.best_vs_compile = max(result.best_vs_compile, verdict.details.timing.speedup_vs_compile or 0.0)
    result.trajectory_best = [per_trajectory[t] for t in sorted(per_trajectory)]
    return result


@dataclass
class Summary:
    """The table's row for one level (or ``level=None``: all tasks)."""

    level: Optional[int]
    tasks: int
    finished: int
    correct: float  # share of tasks
    fast_vs_eager: dict[str, float]  # "0", "1", "1.5" -> share of tasks
    fast_vs_compile: dict[str, float]
    geomean_speedup: Optional[float]  # over tasks with a counting kernel, vs eager
    best_at_k: float
    avg_at_k: float
    compile_error_share: float  # of evaluated candidates
    provenance_rejection_share: float
    untrusted_share: float
    candidates: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(part: float, whole: int) -> float:
    return part / whole if whole else 0.0


def _geomean(values: Sequence[float]) -> Optional[float]:
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def _fast(results: Sequence[TaskResult], attribute: str) -> dict[str, float]:
    return {f"{p:g}": _share(sum(r.correct and getattr(r, attribute) > p for r in results), len(results))
            for p in FAST_THRESHOLDS}


def summarize(results: Sequence[TaskResult], level: Optional[int] = None) -> Summary:
    """The figures over ``results`` (all of one level, or every task)."""
    n = len(results)
    candidates = sum(r.candidates for r in results)
    trajectory_means = [sum(r.trajectory_best) / len(r.trajectory_best) if r.trajectory_best else 0.0
                        for r in results]
    return Summary(
        level=level, tasks=n, finished=sum(r.status == "done" for r in results),
        correct=_share(sum(r.correct for r in results), n),
        fast_vs_eager=_fast(results, "best_vs_eager"), fast_vs_compile=_fast(results, "best_vs_compile"),
        geomean_speedup=_geomean([r.best_vs_eager for r in results if r.correct]),
        best_at_k=_share(sum(r.best_vs_eager for r in results), n),
        avg_at_k=_share(sum(trajectory_means), n),
        compile_error_share=_share(sum(r.compile_errors for r in results), candidates),
        provenance_rejection_share=_share(sum(r.provenance_rejections for r in results), candidates),
        untrusted_share=_share(sum(r.untrusted for r in results), candidates),
        candidates=candidates,
    )


def summaries(results: Sequence[TaskResult]) -> list[Summary]:
    """One summary per level (ascending), then the overall one (``level=None``)."""
    levels = sorted({r.level for r in results})
    rows = [summarize([r for r in results if r.level == level], level) for level in levels]
    return [*rows, summarize(results, None)]
