"""The evaluator seam the loop and the faces use; the real one lives in ``evaluate.evaluator``.

Tests without a GPU inject a double that implements the same ``Evaluator`` protocol.
"""

from __future__ import annotations

import dataclasses
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar

from kevin_agent.data import Task, Verdict
from kevin_agent.eval_modes import (
    DEFAULT_POLICY,
    DEFAULT_SANDBOX,
    Policy,
    SandboxMode,
    parse_policy,
    parse_sandbox_mode,
)

VerdictCallback = Callable[[int, Verdict], None]  # (index into the batch, verdict)
QueueCallback = Callable[[int, int], None]  # (waiting to compile, waiting for the GPU)
WaitCallback = Callable[[str], None]  # "waiting for GPU 0, in use by kevin lsp pid 4242"


EVALUATOR_ENV = "KEVIN_EVALUATOR"  # "cuda" | "replay:PATH": the evaluator when no flag names one
DEFAULT_COMPILE_TIMEOUT_S = 300.0
COMPILE_TIMEOUT_VAR = "KEVIN_COMPILE_TIMEOUT_S"  # a slower machine's build limit (the test suite sets one)


def compile_timeout_default() -> float:
    """The build limit in seconds: KEVIN_COMPILE_TIMEOUT_S when set, else 300 s."""
    import os

    from kevin_agent.errors import UserInputError

    text = os.environ.get(COMPILE_TIMEOUT_VAR, "").strip()
    if not text:
        return DEFAULT_COMPILE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UserInputError(f"{COMPILE_TIMEOUT_VAR}={text!r} is not a number of seconds above 0")
    return value


@dataclass(frozen=True)
class EvalSettings:
    """Knobs of one evaluation. Defaults follow KEVIN.md's measurement practice."""

    correctness_trials: int = 5
    timing_trials: int = 100
    warmup_trials: int = 10
    compile_only: bool = False
    with_torch_compile: bool = True  # also time the torch.compile reference
    compile_timeout_s: float = field(default_factory=compile_timeout_default)  # per build (nvcc + ninja)
    run_timeout_s: float = 180.0  # per candidate in the GPU worker
    arch: Optional[str] = None  # TORCH_CUDA_ARCH_LIST value; detected from the device when None
    cache_dir: Optional[Path] = None  # build cache; default ~/.cache/kevin-agent/build
    seed: int = 42
    policy: Policy = DEFAULT_POLICY  # "strict" (pure CUDA, Kevin's setting) | "partial" (KernelBench's rule)
    sandbox: SandboxMode = DEFAULT_SANDBOX  # "auto" (confine when the kernel can) | "required" | "off"
    cluster: Optional[str] = None  # None (this machine) | "auto" | "ray://HEAD:10001"
    fresh_baselines: bool = False  # measure eager / torch.compile again instead of reusing stored ones
    # the judge runs and reads the candidate's calls itself and its clock times them (evaluate/observe;
    # docs/eval.md). Off until the GPU suite has passed with it: on the H100 of 2026-12-07 the first
    # version's interprocess events failed in the confined worker (they need a shared /dev/shm)
    observe: bool = False

    def __post_init__(self) -> None:
        """No EvalSettings holds an unknown policy or sandbox mode: ValueError naming it."""
        for name, parse in (("policy", parse_policy), ("sandbox", parse_sandbox_mode)):
            try:
                parse(getattr(self, name))
            except ValueError as err:
                raise ValueError(f"{name} {getattr(self, name)!r}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the cache folder as text): the one encoding of evaluation settings,
        for worker jobs, the warm evaluator's address and stored runs."""
        raw = dataclasses.asdict(self)
        raw["cache_dir"] = None if self.cache_dir is None else str(self.cache_dir)
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, unknown: Literal["ignore", "refuse"]) -> EvalSettings:
        """``to_dict`` read back; a missing key takes its default. ``unknown`` keys are ignored where
        an older reader may meet a newer writer (a worker's job, a stored run) and refused where
        both ends are this code (the warm evaluator's settings). ValueError for an unknown key
        (refused) or a bad value, naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(raw) - names)
        if extra and unknown == "refuse":
            raise ValueError(f"unknown settings: {', '.join(extra)}")
        values = {key: value for key, value in raw.items() if key in names}
        if values.get("cache_dir") is not None:
            values["cache_dir"] = Path(values["cache_dir"])
        try:
            return cls(**values)
        except TypeError as err:
            raise ValueError(str(err)) from None


_E = TypeVar("_E", bound="Evaluator")

class Evaluator(ABC):
    """Judges candidate sources against a task. Never raises for a bad candidate.

    ``gpu_name`` is the device verdicts are measured on (None until known); ``check_environment``
    fails fast with a one-line EnvironmentProblem; ``close`` releases worker processes.
    """

    gpu_name: Optional[str] = None
    replayed: bool = False  # its verdicts were recorded elsewhere, not measured on this machine

    @abstractmethod
    def evaluate(
        self,
        task: Task,
        codes: Sequence[str],
        *,
        on_verdict: Optional[VerdictCallback] = None,
        on_queue: Optional[QueueCallback] = None,
        cancel: Optional[threading.Event] = None,
        on_wait: Optional[WaitCallback] = None,
    ) -> list[Verdict]:
        """Static checks, parallel compile, then GPU runs; one verdict per code, in order.
        ``on_wait`` hears why the GPU stage is waiting (another process holds the GPU)."""

    def remeasure(self, task: Task) -> list[Any]:
        """Measure the task's baselines again at the end of a run: their drift (``Drift``s,
        ``.text()`` for people); none by default."""
        return []

    def check_environment(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Raise EnvironmentProblem when this machine cannot evaluate; nothing to check by default."""

    def start(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Start (or top up) worker processes ahead of the next evaluation, for an evaluator that
        lives on between requests (the warm evaluator); nothing to start by default."""

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Release worker processes; nothing to release by default."""

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
