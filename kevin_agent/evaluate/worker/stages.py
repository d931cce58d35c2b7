"""The worker's stages for one job: load, correctness, timing, speed of light -> one Verdict.

Runs inside the isolated worker process only (it executes model-written code).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.worker.loader import describe_exception, install_build_hook, load_module_from_file
from kevin_agent.evaluate.worker.correctness import CorrectnessHarness, run_correctness, to_device
from kevin_agent.evaluate.worker.guards import CapturedReferences, find_patched, patched_message, poison_free_memory, snapshot
from kevin_agent.evaluate.worker.speed_of_light import (
    PeakRates, count_flops, dominant_dtype, load_or_measure_peaks, min_bytes, sol_ms, suspicion_reasons, tensors_in,
)
from kevin_agent.evaluate.worker.timing import Clock, Timer, escape_reason, escape_trials, make_flush, stats_from_samples

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

    def seed_all(self, seed: int) -> None:
        self.captured.get("torch.manual_seed")(seed)
        self.captured.get("torch.cuda.manual_seed")(seed)

    def poison(self) -> int:
        return poison_free_memory(self.device, self.clock.synchronize)

    def patched(self) -> str | None:
        names = find_patched(self.captured)
        return patched_message(names) if names else None

    def fail(self, stage: Stage, message: str, error: str | None = None) -> Verdict:
        self.details.error = error or message
        return Verdict(stage, False, message, self.details)


def environment_details(device: Any) -> VerdictDetails:
    import torch

    return VerdictDetails(
        gpu_name=torch.cuda.get_device_name(device),
        torch_version=torch.__version__,
        cuda_version=str(torch.version.cuda),
    )


def evaluate_job(job: WorkerJob, cache_dir: Path, captured: CapturedReferences, device: Any,
                 stream: Any) -> Verdict:
    """All stages for one job. Raises TaskProblem when the reference itself fails."""
    scratch = Path(job.scratch_dir or tempfile.mkdtemp(prefix="kevin-worker-"))
    try:
        return _evaluate_in(job, cache_dir, scratch, captured, device, stream)
    finally:
        if job.scratch_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


def _evaluate_in(job: WorkerJob, cache_dir: Path, scratch: Path, captured: CapturedReferences,
                 device: Any, stream: Any) -> Verdict:
    ctx = Context(captured, Clock.from_captured(captured, stream), device, job.settings,
                  environment_details(device), scratch / "candidate.py", make_flush(device))
    peaks = _peaks(cache_dir, ctx)  # measured before any candidate code can disturb the GPU
    task, reference, init_inputs = _load_reference(job.task_source, scratch, ctx)
    loaded = _load_candidate(job, cache_dir, ctx, task, init_inputs)
    if isinstance(loaded, Verdict):
        return loaded
    candidate = loaded
    verdict = _correctness(ctx, task, reference, candidate)
    if verdict is not None:
        return verdict
    if ctx.settings.timing_trials <= 0:
        return Verdict(Stage.CORRECTNESS, True, feedback.correct_untimed(), ctx.details)
    return _timing(ctx, task, reference, candidate, peaks)


def _peaks(cache_dir: Path, ctx: Context) -> PeakRates | None:
    try:
        return load_or_measure_peaks(cache_dir, ctx.clock, ctx.device, ctx.flush)
    except Exception as exc:  # speed of light is advisory: report without it
        print(f"kevin-worker: speed-of-light peaks unavailable: {exc}", file=sys.stderr)
        return None


def _load_reference(source: str, scratch: Path, ctx: Context) -> tuple[Any, Any, Any]:
    try:
        task = load_module_from_file(source, scratch / "reference_task.py", "kevin_reference_task")
        ctx.seed_all(ctx.settings.seed)
        init_inputs = to_device(list(task.get_init_inputs()), ctx.device)
        ctx.seed_all(ctx.settings.seed)
        reference = task.Model(*snapshot(init_inputs)).to(ctx.device)
    except Exception as exc:
        raise TaskProblem(describe_exception(exc, scratch / "reference_task.py")) from exc
    return task, reference, init_inputs


def _load_candidate(job: WorkerJob, cache_dir: Path, ctx: Context, task: Any, init_inputs: Any) -> Any:
    """ModelNew on the device after one forward, or a LOAD verdict."""
    import torch

    from kevin_agent.evaluate.build.flags import resolve_arch

    # the builds' own resolution (argument, TORCH_CUDA_ARCH_LIST, device), so the cache keys match
    note = install_build_hook(cache_dir, resolve_arch(job.settings.arch))
    if note:
        print(f"kevin-worker: {note}", file=sys.stderr)
    try:
        module = load_module_from_file(job.candidate_source, ctx.candidate_path, "kevin_candidate")
        if ctx.patched():
            return ctx.fail(Stage.LOAD, ctx.patched() or "")
        model_class = getattr(module, "ModelNew", None)
        if model_class is None:
            return ctx.fail(Stage.LOAD, feedback.runtime_error("Your code does not define class ModelNew."))
        ctx.seed_all(ctx.settings.seed)
        candidate = model_class(*snapshot(init_inputs)).to(ctx.device)
        if ctx.patched():
            return ctx.fail(Stage.LOAD, ctx.patched() or "")
        ctx.seed_all(ctx.settings.seed)
        inputs = to_device(task.get_inputs(), ctx.device)
        ctx.poison()
        with torch.no_grad():
            candidate(*snapshot(inputs))
        ctx.clock.synchronize()
        if ctx.patched():
            return ctx.fail(Stage.LOAD, ctx.patched() or "")
    except Exception as exc:
        text = describe_exception(exc, ctx.candidate_path)
        return ctx.fail(Stage.LOAD, feedback.runtime_error(text), text)
    return candidate


def _correctness(ctx: Context, task: Any, reference: Any, candidate: Any) -> Verdict | None:
    """None when correct; else the failing verdict."""
    harness = CorrectnessHarness(
        reference=reference, candidate=candidate, get_inputs=task.get_inputs, device=ctx.device,
        seed_all=ctx.seed_all, synchronize=ctx.clock.synchronize, poison=ctx.poison,
        check_patched=ctx.patched,
    )
    trials = max(1, ctx.settings.correctness_trials)
    try:
        result = run_correctness(harness, trials, ctx.settings.seed)
    except Exception as exc:
        text = describe_exception(exc, ctx.candidate_path)
        ctx.details.trials_total = trials
        return ctx.fail(Stage.CORRECTNESS, feedback.runtime_error(text), text)
    d = ctx.details
    d.trials_passed, d.trials_total = result.trials_passed, result.trials_total
    d.max_abs_error, d.max_rel_error = result.max_abs_error, result.max_rel_error
    d.atol, d.rtol = result.atol, result.rtol
    if result.ok:
        return None
    message = result.message if result.patched else feedback.incorrect(result.message)
    return ctx.fail(Stage.CORRECTNESS, message, "\n".join(result.problems))


def _timing(ctx: Context, task: Any, reference: Any, candidate: Any, peaks: PeakRates | None) -> Verdict:
    s, d, clock = ctx.settings, ctx.details, ctx.clock
    ctx.seed_all(s.seed + TIMING_SEED_OFFSET)
    inputs = to_device(task.get_inputs(), ctx.device)
    timer = Timer(clock, ctx.flush)
    reference_inputs = snapshot(inputs)
    d.eager = stats_from_samples(timer.time(reference, reference_inputs, s.timing_trials, s.warmup_trials))
    if s.with_torch_compile:
        d.compiled, d.torch_compile_seconds = _time_compiled(timer, reference, reference_inputs, s)
    try:
        candidate_inputs = snapshot(inputs)
        d.kernel = stats_from_samples(timer.time(candidate, candidate_inputs, s.timing_trials, s.warmup_trials))
        synced = stats_from_samples(timer.time_synced(candidate, candidate_inputs, escape_trials(s.timing_trials)))
        escape = escape_reason(d.kernel.median_ms, synced.median_ms, timer.sync_overhead_ms())
    except Exception as exc:
        text = describe_exception(exc, ctx.candidate_path)
        return ctx.fail(Stage.TIMING, feedback.runtime_error(text), text)
    patched = ctx.patched()
    if patched:
        return ctx.fail(Stage.CORRECTNESS, patched)
    d.speedup_vs_eager = d.eager.median_ms / d.kernel.median_ms if d.kernel.median_ms > 0 else None
    if d.compiled is not None and d.kernel.median_ms > 0:
        d.speedup_vs_compile = d.compiled.median_ms / d.kernel.median_ms
    _speed_of_light(ctx, reference, inputs, peaks)
    d.suspicious_reasons = suspicion_reasons(d.sol_fraction, d.speedup_vs_eager, escape, d.kernel.median_ms, d.sol_ms)
    d.suspicious = bool(d.suspicious_reasons)
    message = feedback.correct(d.speedup_vs_eager or 0.0)
    if d.suspicious:
        message += (" However, the timing is not trusted and this answer does not count: "
                    + "; ".join(d.suspicious_reasons) + ".")
    return Verdict(Stage.TIMING, True, message, d)


def _time_compiled(timer: Timer, reference: Any, inputs: Any, s: EvalSettings) -> tuple[Any, float | None]:
    """torch.compile of the reference: (TimingStats, compile seconds), or (None, None) on failure."""
    import torch

    try:
        compiled = torch.compile(reference)
        seconds = timer.first_call_seconds(compiled, inputs)
        return stats_from_samples(timer.time(compiled, inputs, s.timing_trials, s.warmup_trials)), seconds
    except Exception as exc:
        print(f"kevin-worker: torch.compile of the reference failed: {type(exc).__name__}: {exc}"[:2000],
              file=sys.stderr)
        return None, None


def _speed_of_light(ctx: Context, reference: Any, inputs: Any, peaks: PeakRates | None) -> None:
    d = ctx.details
    try:
        flops, outputs = count_flops(reference, snapshot(inputs))
        d.flops = flops
        d.bytes_moved = float(min_bytes(inputs, reference, outputs))
    except Exception as exc:
        print(f"kevin-worker: flop count failed: {exc}", file=sys.stderr)
        return
    if peaks is None or d.kernel is None or d.kernel.median_ms <= 0:
        return
    state = list(reference.parameters()) + list(reference.buffers())
    dtype = dominant_dtype(tensors_in(inputs) + state)
    d.sol_ms = sol_ms(d.flops, d.bytes_moved, peaks.flops_for(dtype), peaks.bandwidth_bytes_per_s)
    d.sol_fraction = d.sol_ms / d.kernel.median_ms

