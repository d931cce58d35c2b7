"""What the judge observed, and what it does to a verdict (the parent's side; stdlib only).

The verdict a worker replies is advisory: its correctness counts only when the judge's own reads
of the outputs agree, and a timed verdict's time and speedups are replaced by the judge's.
``kernel`` stays in the units of the baseline the parent holds (eager and torch.compile, timed
once per task in a worker no candidate ran in): the judge's per-call time scaled by the ratio of
that eager time to the judge's own eager time on the same batches. So ``speedup_vs_eager`` is
exactly the judge's ratio, and ``speedup_vs_compile`` uses torch.compile's ratio to eager from
the baseline. The worker's own median is kept as a cross-check: well below the judge's, the
verdict is not trusted.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, flag_untrusted
from kevin_agent.verdict_records import LATE_WORK, TIMING_DISAGREES, TimingStats

OBSERVED = "observed outside your process"
# the worker's own median may be this much below the judge's before the verdict is not trusted
# (the judge's batches run back to back without the in-process L2 flush, so honest kernels read
# at or above it in-process)
INPROCESS_FLOOR = 0.8


@dataclass
class Observation:
    """What the judge observed: every call it read (``calls``), the problems found, and per
    measured batch the candidate's and the reference's milliseconds per call."""

    calls: int = 0
    problems: list[str] = field(default_factory=list)
    kernel_ms: list[float] = field(default_factory=list)
    eager_ms: list[float] = field(default_factory=list)
    calls_per_batch: int = 0
    late_work: Optional[str] = None  # why the end of a batch is in doubt
    inproc_ms: Optional[float] = None  # what the worker claimed (a cross-check, never evidence)
    error: Optional[str] = None
    kernel_stats: Optional[TimingStats] = None  # of ``kernel_ms`` (the judge's clock, per call)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Optional[Observation]:
        """From the judge's report (parsed JSON); None when it is not an observation."""
        if not isinstance(raw, dict):
            return None
        try:
            stats = raw.get("kernel_stats")
            return cls(int(raw.get("calls") or 0), [str(p)[:2000] for p in raw.get("problems") or []][:20],
                       [float(v) for v in raw.get("kernel_ms") or []][:64],
                       [float(v) for v in raw.get("eager_ms") or []][:64], int(raw.get("calls_per_batch") or 0),
                       _text(raw.get("late_work")), finite(raw.get("inproc_ms")), _text(raw.get("error")),
                       TimingStats.from_dict(stats) if isinstance(stats, dict) else None)
        except (TypeError, ValueError, AttributeError):
            return None


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)[:2000]


def finite(value: Any) -> Optional[float]:
    """``value`` when it is a finite number (never a bool), else None."""
    return float(value) if type(value) in (int, float) and math.isfinite(value) else None


def observed_verdict(verdict: Verdict, seen: Optional[Observation], compile_ratio: Optional[float]) -> Verdict:
    """``verdict`` (which passed in the worker) as the observation leaves it: a correctness
    failure when the judge could not observe or read a wrong output; else, for a timed verdict,
    its time and speedups replaced by the judge's. ``compile_ratio``: torch.compile's time over
    eager's, from the baseline the parent holds (None: no torch.compile figure)."""
    d = dataclasses.replace(verdict.details)
    if seen is None or seen.error or seen.calls == 0:
        why = "it was not observed" if seen is None else (seen.error or "no call was observed")
        text = (f"the judge outside your process could not run and read your calls ({why}); a result it "
                "cannot observe earns nothing")
        d.error = text
        return Verdict(Stage.CORRECTNESS, False, feedback.incorrect(text), d)
    if seen.problems:
        d.error = "\n".join(seen.problems)
        return Verdict(Stage.CORRECTNESS, False, feedback.incorrect(seen.problems[0]), d)
    d.correctness = dataclasses.replace(d.correctness, judged_calls=(d.correctness.judged_calls or 0) + seen.calls)
    if verdict.stage == Stage.TIMING and seen.kernel_ms and seen.eager_ms and seen.kernel_stats is not None:
        d.timing = _timed_outside(d, seen, compile_ratio)
        if seen.late_work:
            flag_untrusted(d, LATE_WORK, seen.late_work)
        _cross_check(d, seen)
        message = feedback.correct(d.timing.speedup_vs_eager or 0.0)
        if d.trust.flags:
            message = feedback.untrusted([f.reason for f in d.trust.flags])
        return dataclasses.replace(verdict, details=d, message=_keep_tail(verdict.message, message))
    return dataclasses.replace(verdict, details=d)


def _timed_outside(d: Any, seen: Observation, compile_ratio: Optional[float]) -> Any:
    assert seen.kernel_stats is not None
    t = dataclasses.replace(d.timing)
    kernel_obs, eager_obs = statistics.median(seen.kernel_ms), statistics.median(seen.eager_ms)
    eager_base = t.eager.median_ms if isinstance(t.eager, TimingStats) else eager_obs
    scale = eager_base / eager_obs if eager_obs > 0 else 1.0
    t.inprocess_kernel_ms = t.kernel.median_ms if isinstance(t.kernel, TimingStats) else seen.inproc_ms
    t.kernel = scaled(seen.kernel_stats, scale)
    t.timed_outside, t.outside_kernel_ms, t.outside_eager_ms = True, kernel_obs, eager_obs
    t.outside_calls_per_batch = seen.calls_per_batch
    t.speedup_vs_eager = eager_obs / kernel_obs if kernel_obs > 0 else None
    t.speedup_vs_compile = (t.speedup_vs_eager / compile_ratio if t.speedup_vs_eager and compile_ratio
                            else None)
    if t.sol_ms is not None and t.kernel.median_ms > 0:
        t.sol_fraction = t.sol_ms / t.kernel.median_ms
    return t


def scaled(stats: TimingStats, factor: float) -> TimingStats:
    """Every figure of ``stats`` times ``factor`` (order statistics scale with their samples)."""
    def times(value: Optional[float]) -> Optional[float]:
        return None if value is None else value * factor

    return TimingStats(stats.median_ms * factor, stats.mean_ms * factor, stats.min_ms * factor,
                       stats.max_ms * factor, stats.iqr_ms * factor, stats.trials, times(stats.ci_low_ms),
                       times(stats.ci_high_ms))


def _cross_check(d: Any, seen: Observation) -> None:
    """The worker's own median (scaled like the judge's) well below the judge's: not trusted."""
    t = d.timing
    claimed = t.inprocess_kernel_ms
    if claimed is None or t.kernel is None or t.kernel.median_ms <= 0:
        return
    if claimed < INPROCESS_FLOOR * t.kernel.median_ms:
        flag_untrusted(d, TIMING_DISAGREES, (
            f"your process timed {claimed:.4f} ms per call, but {t.kernel.median_ms:.4f} ms was observed outside "
            "it"))


def _keep_tail(worker_message: str, head: str) -> str:
    """The judge's first line, then what the worker's message adds after its first line (the
    kernel table), which is feedback for the model, not evidence."""
    lines = worker_message.splitlines()
    return "\n".join([head, *lines[1:]]) if lines else head


def compile_ratio_of(eager: Any, compiled: Any) -> Optional[float]:
    """torch.compile's median over eager's (None when either is missing)."""
    if not isinstance(eager, TimingStats) or not isinstance(compiled, TimingStats) or eager.median_ms <= 0:
        return None
    return compiled.median_ms / eager.median_ms


__all__ = ["OBSERVED", "Observation", "compile_ratio_of", "finite", "observed_verdict"]
