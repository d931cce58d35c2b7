"""What every stage of a worker job shares: the captured originals, the clock, the device, the
verdict details being filled, and loading the reference task."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.worker.correctness import make_inputs, to_device
from kevin_agent.evaluate.worker.guards import (
    CapturedReferences,
    find_patched,
    patched_message,
    poison_free_memory,
    snapshot,
)
from kevin_agent.evaluate.worker.loader import describe_exception, load_module_from_file
from kevin_agent.evaluate.worker.timing import Clock
from kevin_agent.verdict_records import EnvironmentRecord

TIMING_SEED_OFFSET = 10_000


class TaskProblem(Exception):
    """The reference task itself fails (not the candidate's fault)."""


@dataclass
class Context:
    """Everything a stage needs; callables are the worker's captured originals."""

    captured: CapturedReferences
    clock: Clock
    device: Any
    settings: EvalSettings
    details: VerdictDetails
    candidate_path: Path
    flush: Any = None  # zeroes a buffer larger than twice the L2 cache
    extensions: list[Any] = field(default_factory=list)  # BuildResults of the candidate's load_inline calls
    provenance: Any = None  # the accepted ProvenanceResult (its kernel table goes into the feedback)
    settings_at_start: Any = None  # a private copy of ``settings``: a candidate must not change them
    witness: Any = None  # the judge_wire.WitnessWriter of this job (None: no judge outside the process)

    def __post_init__(self) -> None:
        import copy

        self.settings_at_start = copy.deepcopy(self.settings)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage into ``details.environment.stage_seconds`` (on the captured clock), however it ends."""
        started = self.clock.perf_counter()
        try:
            yield
        finally:
            self.details.environment.stage_seconds[name] = round(self.clock.perf_counter() - started, 4)

    def seed_all(self, seed: int) -> None:
        self.captured.get("torch.manual_seed")(seed)
        self.captured.get("torch.cuda.manual_seed")(seed)

    def poison(self) -> int:
        return poison_free_memory(self.device, self.clock.synchronize)

    def patched(self) -> str | None:
        names = find_patched(self.captured)
        if dict(vars(self.settings)) != dict(vars(self.settings_at_start)):  # values, not a rewritable __eq__
            names.append("the job's evaluation settings")
        return patched_message(names) if names else None

    def fail(self, stage: Stage, message: str, error: str | None = None) -> Verdict:
        self.details.error = error or message
        return Verdict(stage, False, message, self.details)

    def timing_inputs(self, task: Any) -> Any:
        """The inputs the baseline times the reference on (their own seed, apart from correctness)."""
        self.seed_all(self.settings.seed + TIMING_SEED_OFFSET)
        return make_inputs(task.get_inputs, self.device)

    def unpredictable_inputs(self, task: Any) -> tuple[int, Any]:
        """(seed, one input set from it): the seed drawn with os.urandom (the candidate cannot
        know it ahead), kept so the judge outside the process can make the same set."""
        import os

        seed = int.from_bytes(os.urandom(8), "little") >> 1
        self.seed_all(seed)
        return seed, make_inputs(task.get_inputs, self.device)


def environment_details(device: Any) -> VerdictDetails:
    import torch

    properties = torch.cuda.get_device_properties(device)
    uuid = getattr(properties, "uuid", None)
    return VerdictDetails(environment=EnvironmentRecord(
        gpu_name=torch.cuda.get_device_name(device),
        torch_version=torch.__version__,
        cuda_version=str(torch.version.cuda),
        gpu_uuid=f"GPU-{uuid}" if uuid is not None else None,
    ))


def load_reference(source: str, scratch: Path, ctx: Context) -> tuple[Any, Any, Any]:
    """(task module, reference Model on the device, init inputs); TaskProblem when it fails."""
    try:
        return build_reference(source, scratch / "reference_task.py", "kevin_reference_task", ctx.seed_all,
                               ctx.settings.seed, ctx.device)
    except Exception as exc:
        raise TaskProblem(describe_exception(exc, scratch / "reference_task.py")) from exc


def build_reference(source: str, path: Path, module_name: str, seed_all: Callable[[int], object], seed: int,
                    device: Any) -> tuple[Any, Any, Any]:
    """(task module, reference Model on ``device``, init inputs): the one construction the worker
    and the judge process both use, so their weights are the same. Exceptions propagate."""
    task = load_module_from_file(source, path, module_name)
    seed_all(seed)
    init_inputs = to_device(list(task.get_init_inputs()), device)
    seed_all(seed)
    return task, task.Model(*snapshot(init_inputs)).to(device), init_inputs
