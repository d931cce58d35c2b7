"""The data that flows through kevin-agent: tasks, candidates, verdicts.

Plain dataclasses that serialise to JSON (``to_dict`` / ``from_dict``). Failures are data:
a ``Verdict`` with ``ok=False`` carries strings, never exception objects. A verdict's evidence is
one record per stage (``verdict_records``, re-exported here). This module imports only the standard
library (and ``verdict_records``, which does too) so it loads on a bare GPU host.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from kevin_agent.safe_text import MAX_MESSAGE, candidate_text
from kevin_agent.verdict_records import (
    BEYOND_SPEED_OF_LIGHT,
    ESCAPED_STREAM,
    IMPLAUSIBLE_SPEEDUP,
    PROVENANCE_UNCHECKED,
    TIMED_BELOW_PROFILE,
    TRUST_FLAGS,
    UNCLASSIFIED,
    BuildRecord,
    CorrectnessRecord,
    EnvironmentRecord,
    ProvenanceRecord,
    TimingRecord,
    TimingStats,
    TrustFlag,
    TrustRecord,
    record_from_dict,
    timing_from_dict,
    trust_from_dict,
)

__all__ = [
    "BEYOND_SPEED_OF_LIGHT", "ESCAPED_STREAM", "IMPLAUSIBLE_SPEEDUP", "PROVENANCE_UNCHECKED",
    "TIMED_BELOW_PROFILE", "TRUST_FLAGS", "UNCLASSIFIED", "BuildRecord", "Candidate", "CorrectnessRecord",
    "EnvironmentRecord", "Message", "ProvenanceRecord", "Stage", "Task", "TaskOrigin", "TimingRecord",
    "TimingStats", "TrustFlag", "TrustRecord", "Verdict", "VerdictDetails", "classify_reason", "flag_untrusted",
]

REPLAY_GPU_NAME = "replay"  # the gpu_name of recorded verdicts: never a measurement on this machine

# Older verdicts recorded only reasons: the wording each check used, to name its flag again.
_REASON_PREFIXES: tuple[tuple[str, str], ...] = (
    ("work escapes the timed stream", ESCAPED_STREAM),
    ("faster than the gpu's speed of light", BEYOND_SPEED_OF_LIGHT),
    ("faster than the speed of light", BEYOND_SPEED_OF_LIGHT),
    ("provenance not checked", PROVENANCE_UNCHECKED),
    ("timed faster than the profiler", TIMED_BELOW_PROFILE),
)

# Eager's correctness tolerance (KEVIN.md), atol = rtol: judged by the worker, written into the drop-in's test
FP32_TOLERANCE = 1e-4  # float32 / float64
LOW_PRECISION_TOLERANCE = 1e-2  # float16, bfloat16 and narrower floats


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
    """Numbers and evidence for the user: one record per stage (``verdict_records``), each field
    optional. ``static_rule`` and ``error`` are one string each, from the static checks and from a
    failed build, load or run."""

    build: BuildRecord = field(default_factory=BuildRecord)
    correctness: CorrectnessRecord = field(default_factory=CorrectnessRecord)
    provenance: ProvenanceRecord = field(default_factory=ProvenanceRecord)
    timing: TimingRecord = field(default_factory=TimingRecord)
    trust: TrustRecord = field(default_factory=TrustRecord)
    environment: EnvironmentRecord = field(default_factory=EnvironmentRecord)
    static_rule: str | None = None  # the first static rule that fired
    error: str | None = None  # run-time failure

    def to_dict(self) -> dict[str, Any]:
        """The nested form: one object per record, then ``static_rule`` and ``error``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VerdictDetails:
        """Reads the nested form and the older flat one (one object of ~50 keys, still in stored
        runs and recorded files); unknown keys are ignored."""
        return cls(
            build=record_from_dict(BuildRecord, raw.get("build"), raw),
            correctness=record_from_dict(CorrectnessRecord, raw.get("correctness"), raw),
            provenance=record_from_dict(ProvenanceRecord, raw.get("provenance"), raw),
            timing=timing_from_dict(raw.get("timing"), raw),
            trust=trust_from_dict(raw.get("trust"), raw),
            environment=record_from_dict(EnvironmentRecord, raw.get("environment"), raw),
            static_rule=raw.get("static_rule"),
            error=raw.get("error"),
        )

    def all_trust_flags(self) -> list[TrustFlag]:
        """Every reason not to trust the result: the recorded flags, then reasons recorded without
        a flag (older verdicts) named by their wording; "flagged" alone still counts."""
        flags = list(self.trust.flags)
        named = {f.reason for f in flags}
        flags += [TrustFlag(classify_reason(r), r) for r in self.trust.reasons if r not in named]
        if self.trust.suspicious and not flags:
            flags.append(TrustFlag(UNCLASSIFIED, "flagged as untrusted, no reason recorded"))
        return flags


def flag_untrusted(details: VerdictDetails, name: str, reason: str) -> None:
    """Record that the trust check ``name`` fired: the verdict earns nothing and is never a best.
    A module function, not a method: the worker's guards watch module functions for patches."""
    trust = details.trust
    trust.flags = [*trust.flags, TrustFlag(name, reason)]
    trust.reasons = [*trust.reasons, reason]
    trust.suspicious = True


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
        their control characters are spelled out and their length capped (``safe_text``)."""
        if isinstance(self.message, str):
            self.message = candidate_text(self.message, MAX_MESSAGE)
        details = self.details
        if isinstance(details.error, str):
            details.error = candidate_text(details.error)
        if isinstance(details.build.compiler_errors, str):
            details.build.compiler_errors = candidate_text(details.build.compiler_errors)

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
        speedup = self.details.timing.speedup_vs_eager
        if not self.correct or speedup is None:
            return 0.0
        return speedup

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
