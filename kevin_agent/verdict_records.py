"""A verdict's evidence, one typed record per stage (``VerdictDetails`` holds one of each).

Every field is optional, as the stages fill only what they reached. Each record has a
``FLAT_NAMES`` table: the name its fields had in the older, flat ``details`` object (stored runs,
recorded verdicts), so ``VerdictDetails.from_dict`` reads both forms. Standard library only: the
GPU worker fills these records.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Why the evaluator does not trust a result: stable names (exports, tools) -> a short label for people.
ESCAPED_STREAM = "escaped_stream"  # work ran where the timed stream does not wait for it
BEYOND_SPEED_OF_LIGHT = "beyond_speed_of_light"  # faster than the GPU's peak rates allow
IMPLAUSIBLE_SPEEDUP = "implausible_speedup"  # over 10x PyTorch eager
PROVENANCE_UNCHECKED = "provenance_unchecked"  # what ran on the GPU could not be attributed
TIMED_BELOW_PROFILE = "timed_below_profile"  # the events measured less than the profiler saw one call use
UNCLASSIFIED = "unclassified"  # an older verdict's flag whose reason names none of the above
LATE_WORK = "late_work"  # the judge's read of the outputs waited for work after the calls said they were done
TIMING_DISAGREES = "timing_disagrees"  # the worker's own clock says faster than the judge observed
TRUST_FLAGS: dict[str, str] = {
    ESCAPED_STREAM: "work escaped the timed stream",
    BEYOND_SPEED_OF_LIGHT: "faster than speed of light",
    IMPLAUSIBLE_SPEEDUP: "implausible speedup",
    PROVENANCE_UNCHECKED: "provenance not checked",
    TIMED_BELOW_PROFILE: "timed below the profiler's record",
    LATE_WORK: "work after the call returned",
    TIMING_DISAGREES: "in-process time disagrees with the outside",
    UNCLASSIFIED: "flagged",
}


@dataclass
class TimingStats:
    """Milliseconds over ``trials`` timed runs."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    trials: int
    ci_low_ms: float | None = None  # 95% confidence interval of the median (order statistics)
    ci_high_ms: float | None = None

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TimingStats:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})

    @property
    def interval(self) -> tuple[float, float]:
        """The median's confidence interval (the median itself when none was measured)."""
        low = self.ci_low_ms if self.ci_low_ms is not None else self.median_ms
        high = self.ci_high_ms if self.ci_high_ms is not None else self.median_ms
        return low, high


@dataclass(frozen=True)
class TrustFlag:
    """One trust check that fired: its stable ``name`` (a ``TRUST_FLAGS`` key) and why, for people."""

    name: str
    reason: str

    @property
    def label(self) -> str:
        """The short label every face shows ("faster than speed of light")."""
        return TRUST_FLAGS.get(self.name, self.name.replace("_", " "))


@dataclass
class BuildRecord:
    """The compile: seconds, cache use, where its log is, and the errors of a failed build."""

    seconds: float | None = None
    cache_hit: bool | None = None
    log_path: str | None = None
    path: str | None = None  # "split" (fast path) or "whole" (fallback)
    compiler_errors: str | None = None

    FLAT_NAMES: ClassVar[dict[str, str]] = {
        "seconds": "build_seconds", "log_path": "build_log_path", "path": "build_path"}

    def fill_from(self, other: BuildRecord) -> None:
        """Take ``other``'s seconds, cache use, log and path where this record has none."""
        if self.seconds is None:
            self.seconds = other.seconds
        if self.cache_hit is None:
            self.cache_hit = other.cache_hit
        if self.log_path is None:
            self.log_path = other.log_path
        if self.path is None:
            self.path = other.path


@dataclass
class CorrectnessRecord:
    """How the outputs compared with the reference's."""

    trials_passed: int | None = None
    trials_total: int | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    rtol: float | None = None
    # against a float64 run of the reference (max abs errors; None when not computed)
    error_vs_fp64: float | None = None  # the candidate's
    reference_error_vs_fp64: float | None = None  # eager's own (the reference in its own precision)
    rms_error_vs_fp64: float | None = None
    reference_rms_error_vs_fp64: float | None = None
    fp64_accepted: bool | None = None  # True: passed only by the float64 rule (outside atol/rtol of eager)
    judged_calls: int | None = None  # calls the judge outside the candidate's process confirmed (issue 19)
    input_sets: list[str] | None = None  # what each trial ran on: plain get_inputs(), or a variant (or why skipped)

    FLAT_NAMES: ClassVar[dict[str, str]] = {}


@dataclass
class ProvenanceRecord:
    """What ran on the GPU in one profiled forward call (evaluate/provenance) and the policy's say."""

    kernels: list[dict[str, Any]] | None = None  # {name, origin, calls, ms, share, role, family}, largest first
    own_share: float | None = None  # the candidate's own kernels' share of the GPU time
    foreign_share: float | None = None
    policy: str | None = None  # "strict" | "partial"
    ok: bool | None = None
    partial_would_accept: bool | None = None  # strict rejections: whether partial would have accepted
    reasons: list[str] = field(default_factory=list)
    reference_launches: int | None = None  # GPU launches of one reference forward (partial's yardstick)
    summary: str | None = None  # one line for the user

    FLAT_NAMES: ClassVar[dict[str, str]] = {
        "policy": "provenance_policy", "ok": "provenance_ok", "reasons": "provenance_reasons",
        "summary": "provenance_summary"}


@dataclass
class TimingRecord:
    """The timed runs, the speedups, the speed-of-light bound and whether the baseline was reused."""

    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile reference
    kernel: TimingStats | None = None
    torch_compile_seconds: float | None = None  # time torch.compile took to build, reported apart
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    # speed of light
    flops: float | None = None
    bytes_moved: float | None = None
    sol_ms: float | None = None
    sol_fraction: float | None = None
    # the baseline (eager / torch.compile timings)
    baseline_cached: bool | None = None  # reused, not re-measured
    baseline_seconds: float | None = None  # how long measuring them took, when this evaluation did
    # the time observed outside the candidate's process (``evaluate.observe``): per call, in batches
    timed_outside: bool | None = None  # ``kernel`` and the speedups come from the judge's own clock
    outside_kernel_ms: float | None = None  # median per call of the candidate's batches, judge's clock
    outside_eager_ms: float | None = None  # the reference's, same batches and clock
    outside_calls_per_batch: int | None = None
    inprocess_kernel_ms: float | None = None  # what the worker's own events said (a cross-check only)

    FLAT_NAMES: ClassVar[dict[str, str]] = {}


@dataclass
class TrustRecord:
    """The trust checks that fired (``data.flag_untrusted``): the verdict earns nothing."""

    suspicious: bool = False  # not trusted (kept with the reasons for older readers; see ``flags``)
    reasons: list[str] = field(default_factory=list)
    flags: list[TrustFlag] = field(default_factory=list)

    FLAT_NAMES: ClassVar[dict[str, str]] = {"reasons": "suspicious_reasons", "flags": "trust_flags"}


@dataclass
class EnvironmentRecord:
    """Where and how it ran: the GPU, the versions, the evaluator's lane and sandbox, per-stage
    seconds, and whether it is a recorded verdict served again (evaluate/replay.py)."""

    gpu_name: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    gpu_uuid: str | None = None  # the physical device it ran on
    lane: str | None = None  # which lane of the evaluator ran it, e.g. "cuda:0" or "ray:node-2/cuda:1"
    sandbox: str | None = None  # how the candidate was confined: "landlock abi 7 + seccomp", "none (why)"
    stage_seconds: dict[str, float] = field(default_factory=dict)  # the worker's seconds per stage, in order
    replayed: bool = False  # never measured here
    measured_in: str | None = None  # the run id the recorded verdict was measured in

    FLAT_NAMES: ClassVar[dict[str, str]] = {}


def record_from_dict(cls: type[Any], nested: Any, flat: dict[str, Any]) -> Any:
    """A record of type ``cls`` from its nested object, else from the older flat keys of ``flat``
    (unknown keys ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    if isinstance(nested, dict):
        values = {k: v for k, v in nested.items() if k in names}
    else:
        values = {name: flat[cls.FLAT_NAMES.get(name, name)] for name in names
                  if cls.FLAT_NAMES.get(name, name) in flat}
    return cls(**values)


def timing_from_dict(nested: Any, flat: dict[str, Any]) -> TimingRecord:
    record: TimingRecord = record_from_dict(TimingRecord, nested, flat)
    record.eager = _stats(record.eager)
    record.compiled = _stats(record.compiled)
    record.kernel = _stats(record.kernel)
    return record


def _stats(value: Any) -> TimingStats | None:
    """Timing stats read from JSON (a dict), or already a ``TimingStats``, or None."""
    if isinstance(value, dict):
        return TimingStats.from_dict(value)
    return value if isinstance(value, TimingStats) else None


def trust_from_dict(nested: Any, flat: dict[str, Any]) -> TrustRecord:
    record: TrustRecord = record_from_dict(TrustRecord, nested, flat)
    record.flags = [TrustFlag(str(f.get("name", UNCLASSIFIED)), str(f.get("reason", "")))
                    for f in record.flags or [] if isinstance(f, dict)]
    record.reasons = list(record.reasons or [])
    return record
