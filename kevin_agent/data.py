"""The data that flows through kevin-agent: tasks, candidates, verdicts.

Plain dataclasses that serialise to JSON (``to_dict`` / ``from_dict``). Failures are data:
a ``Verdict`` with ``ok=False`` carries strings, never exception objects. This module imports
only the standard library so it loads on a bare GPU host.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from kevin_agent.safe_text import terminal_safe

REPLAY_GPU_NAME = "replay"  # the gpu_name of recorded verdicts: never a measurement on this machine

# Why the evaluator does not trust a result: stable names (exports, tools) -> a short label for people.
ESCAPED_STREAM = "escaped_stream"  # work ran where the timed stream does not wait for it
BEYOND_SPEED_OF_LIGHT = "beyond_speed_of_light"  # faster than the GPU's peak rates allow
IMPLAUSIBLE_SPEEDUP = "implausible_speedup"  # over 10x PyTorch eager
PROVENANCE_UNCHECKED = "provenance_unchecked"  # what ran on the GPU could not be attributed
TIMED_BELOW_PROFILE = "timed_below_profile"  # the events measured less than the profiler saw one call use
UNCLASSIFIED = "unclassified"  # an older verdict's flag whose reason names none of the above
TRUST_FLAGS: dict[str, str] = {
    ESCAPED_STREAM: "work escaped the timed stream",
    BEYOND_SPEED_OF_LIGHT: "faster than speed of light",
    IMPLAUSIBLE_SPEEDUP: "implausible speedup",
    PROVENANCE_UNCHECKED: "provenance not checked",
    TIMED_BELOW_PROFILE: "timed below the profiler's record",
    UNCLASSIFIED: "flagged",
}
# Older verdicts recorded only reasons: the wording each check used, to name its flag again.
_REASON_PREFIXES: tuple[tuple[str, str], ...] = (
    ("work escapes the timed stream", ESCAPED_STREAM),
    ("faster than the gpu's speed of light", BEYOND_SPEED_OF_LIGHT),
    ("faster than the speed of light", BEYOND_SPEED_OF_LIGHT),
    ("provenance not checked", PROVENANCE_UNCHECKED),
    ("timed faster than the profiler", TIMED_BELOW_PROFILE),
)


@dataclass(frozen=True)
class Message:
    """One chat message sent to the model."""

    role: str  # "system" | "user" | "assistant"
    content: str


class Stage(str, enum.Enum):
    """How far a candidate got. Ordered: each stage needs the ones before it."""

    FORMAT = "format"  # the model's reply could be parsed into code
    STATIC = "static"  # static checks (reward-hack rules)
    COMPILE = "compile"  # nvcc / g++ through torch's build path
    LOAD = "load"  # module import, ModelNew construction, first run
    CORRECTNESS = "correctness"  # matched the reference on fresh inputs
    PROVENANCE = "provenance"  # the GPU work ran in the candidate's own kernels (policy strict/partial)
    TIMING = "timing"  # timed against eager and torch.compile

    @property
    def order(self) -> int:
        return list(Stage).index(self)


@dataclass(frozen=True)
class TaskOrigin:
    """Where a task came from in the user's code (1-based, inclusive lines)."""

    path: str
    class_name: str
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Task:
    """A self-contained, KernelBench-shaped task.

    ``source`` defines ``class Model(nn.Module)`` plus module-level ``get_inputs()`` and
    ``get_init_inputs()``, and only the helpers, constants and imports the class needs.
    """

    source: str
    class_name: str
    origin: TaskOrigin | None = None
    inputs_from: str = "module functions"  # or "static methods"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Task:
        origin = raw.get("origin")
        return cls(
            source=raw["source"],
            class_name=raw["class_name"],
            origin=TaskOrigin(**origin) if origin else None,
            inputs_from=raw.get("inputs_from", "module functions"),
        )


@dataclass
class Candidate:
    """One model response, split into reasoning, code and summary."""

    trajectory: int
    turn: int
    response: str = ""
    reasoning: str = ""
    code: str | None = None
    summary: str = ""
    finish_reason: str = "stop"
    parse_error: str | None = None  # set when the reply could not be parsed (format verdict)
    tokens: int = 0
    id: str = ""  # store id, "t{trajectory}.{turn}" by convention

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Candidate:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


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


def classify_reason(reason: str) -> str:
    """The flag name of a reason recorded without one (older verdicts); ``UNCLASSIFIED`` if unknown."""
    text = reason.strip().lower()
    for prefix, name in _REASON_PREFIXES:
        if text.startswith(prefix):
            return name
    if "faster than pytorch eager" in text:
        return IMPLAUSIBLE_SPEEDUP
    return UNCLASSIFIED


@dataclass
class VerdictDetails:
    """Numbers and evidence for the user. Every field is optional."""

    # correctness
    trials_passed: int | None = None
    trials_total: int | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    rtol: float | None = None
    # correctness against a float64 run of the reference (max abs errors; None when not computed)
    error_vs_fp64: float | None = None  # the candidate's
    reference_error_vs_fp64: float | None = None  # eager's own (the reference in its own precision)
    rms_error_vs_fp64: float | None = None
    reference_rms_error_vs_fp64: float | None = None
    fp64_accepted: bool | None = None  # True: passed only by the float64 rule (outside atol/rtol of eager)
    # provenance: what ran on the GPU in one profiled forward call (evaluate/provenance)
    kernels: list[dict[str, Any]] | None = None  # {name, origin, calls, ms, share, role, family}, largest first
    own_share: float | None = None  # the candidate's own kernels' share of the GPU time
    foreign_share: float | None = None
    provenance_policy: str | None = None  # "strict" | "partial"
    provenance_ok: bool | None = None
    partial_would_accept: bool | None = None  # strict rejections: whether partial would have accepted
    provenance_reasons: list[str] = field(default_factory=list)
    reference_launches: int | None = None  # GPU launches of one reference forward (partial's yardstick)
    provenance_summary: str | None = None  # one line for the user
    # timing
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
    suspicious: bool = False  # not trusted (kept with the reasons for older readers; see ``trust_flags``)
    suspicious_reasons: list[str] = field(default_factory=list)
    trust_flags: list[TrustFlag] = field(default_factory=list)  # the trust checks that fired (``flag_untrusted``)
    # build
    build_seconds: float | None = None
    cache_hit: bool | None = None
    build_log_path: str | None = None
    build_path: str | None = None  # "split" (fast path) or "whole" (fallback)
    compiler_errors: str | None = None
    # static
    static_rule: str | None = None
    # run-time failure
    error: str | None = None
    # environment
    gpu_name: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    gpu_uuid: str | None = None  # the physical device it ran on
    lane: str | None = None  # which lane of the evaluator ran it, e.g. "cuda:0" or "ray:node-2/cuda:1"
    baseline_cached: bool | None = None  # eager / torch.compile timings reused, not re-measured
    baseline_seconds: float | None = None  # how long measuring them took, when this evaluation did
    sandbox: str | None = None  # how the candidate was confined: "landlock abi 7 + seccomp", "none (why)"
    stage_seconds: dict[str, float] = field(default_factory=dict)  # the worker's seconds per stage, in order
    # provenance: a recorded verdict served again (evaluate/replay.py), never measured here
    replayed: bool = False
    measured_in: str | None = None  # the run id the recorded verdict was measured in

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VerdictDetails:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in names}
        for key in ("eager", "compiled", "kernel"):
            if isinstance(values.get(key), dict):
                values[key] = TimingStats.from_dict(values[key])
        values["trust_flags"] = [TrustFlag(str(f.get("name", UNCLASSIFIED)), str(f.get("reason", "")))
                                 for f in values.get("trust_flags") or [] if isinstance(f, dict)]
        return cls(**values)

    def all_trust_flags(self) -> list[TrustFlag]:
        """Every reason not to trust the result: the recorded flags, then reasons recorded without
        a flag (older verdicts) named by their wording; "flagged" alone still counts."""
        flags = list(self.trust_flags)
        named = {f.reason for f in flags}
        flags += [TrustFlag(classify_reason(r), r) for r in self.suspicious_reasons if r not in named]
        if self.suspicious and not flags:
            flags.append(TrustFlag(UNCLASSIFIED, "flagged as untrusted, no reason recorded"))
        return flags


def flag_untrusted(details: VerdictDetails, name: str, reason: str) -> None:
    """Record that the trust check ``name`` fired: the verdict earns nothing and is never a best.
    A module function, not a method: the worker's guards watch module functions for patches."""
    details.trust_flags = [*details.trust_flags, TrustFlag(name, reason)]
    details.suspicious_reasons = [*details.suspicious_reasons, reason]
    details.suspicious = True


@dataclass
class Verdict:
    """The evaluator's judgement of one candidate.

    ``stage`` is the last stage reached; ``ok`` says whether it passed. ``message`` is Kevin's
    feedback wording for the model; ``details`` are for the user.
    """

    stage: Stage
    ok: bool
    message: str
    details: VerdictDetails = field(default_factory=VerdictDetails)

    def __post_init__(self) -> None:
        """The candidate's words (compiler errors, what it printed, its exceptions) reach terminals:
        their control characters are spelled out (``safe_text``)."""
        if isinstance(self.message, str):
            self.message = terminal_safe(self.message)
        for name in ("error", "compiler_errors"):
            value = getattr(self.details, name, None)
            if isinstance(value, str):
                setattr(self.details, name, terminal_safe(value))

    @property
    def passed(self) -> bool:
        """Passed correctness and (when it ran) provenance, whether or not it was timed or trusted.

        A candidate that computed the right numbers in foreign kernels (rejected by provenance)
        did not pass."""
        if self.stage.order > Stage.PROVENANCE.order:
            return True
        return self.ok and self.stage in (Stage.CORRECTNESS, Stage.PROVENANCE)

    @property
    def trust_flags(self) -> list[TrustFlag]:
        """The evaluator's reasons not to trust this verdict (empty: trusted)."""
        return self.details.all_trust_flags()

    @property
    def trusted(self) -> bool:
        """No trust check fired (escaping work, speed of light, implausible speedup, provenance)."""
        return not self.trust_flags

    @property
    def correct(self) -> bool:
        """Passed and trusted: what earns a reward (KEVIN.md's score = 0.3 * correct + speedup).

        What the evaluator cannot trust counts as not correct: it earns nothing and is never a best."""
        return self.passed and self.trusted

    @property
    def speedup(self) -> float:
        """Speedup over eager, 0 when not correct or not timed (Kevin's convention)."""
        if not self.correct or self.details.speedup_vs_eager is None:
            return 0.0
        return self.details.speedup_vs_eager

    @property
    def counts_as_best(self) -> bool:
        """Correct (so trusted), timed."""
        return self.correct and self.stage is Stage.TIMING and self.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage.value,
            "ok": self.ok,
            "correct": self.correct,
            "trusted": self.trusted,
            "message": self.message,
            "details": self.details.to_dict(),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Verdict:
        return cls(
            stage=Stage(raw["stage"]),
            ok=bool(raw["ok"]),
            message=raw.get("message", ""),
            details=VerdictDetails.from_dict(raw.get("details") or {}),
        )
