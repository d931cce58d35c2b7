"""The baseline job: the reference timed once per task, GPU and settings (eager and torch.compile,
adaptive trials, L2 flushed), with what the speed of light needs and the reference's GPU launch
count (provenance's partial policy), reused for every candidate."""

from __future__ import annotations

import sys
from typing import Any

from kevin_agent.evaluate.protocol import Baseline
from kevin_agent.evaluate.worker.context import Context, TaskProblem
from kevin_agent.evaluate.worker.guards import snapshot
from kevin_agent.evaluate.worker.loader import describe_exception
from kevin_agent.evaluate.worker.provenance import provenance_inputs, reference_launches
from kevin_agent.evaluate.worker.speed_of_light import count_flops, dominant_dtype, dtype_name, min_bytes, tensors_in
from kevin_agent.evaluate.worker.timing import Timer, stats_from_samples


def measure_baseline(ctx: Context, task: Any, reference: Any) -> Baseline:
    """Time the reference (eager, then torch.compile); TaskProblem when eager itself fails. Each
    part's seconds go into ``stage_seconds`` (``baseline_eager``, ``baseline_launches``,
    ``baseline_compile``, ``baseline_compiled``, ``baseline_flops``): where a baseline job's time goes."""
    s, d = ctx.settings, ctx.details
    inputs = ctx.timing_inputs(task)
    timer = Timer(ctx.clock, ctx.flush)
    try:
        with ctx.stage("baseline_eager"):
            eager = stats_from_samples(timer.time_adaptive(reference, snapshot(inputs), s.timing_trials,
                                                           s.warmup_trials))
    except Exception as exc:
        raise TaskProblem(describe_exception(exc, None)) from exc
    with ctx.stage("baseline_launches"):
        launches = reference_launches(ctx, reference, provenance_inputs(ctx, task))  # before torch.compile
    compiled, compile_seconds = _time_compiled(ctx, timer, reference, snapshot(inputs)) \
        if s.with_torch_compile else (None, None)
    baseline = Baseline(eager=eager, compiled=compiled, torch_compile_seconds=compile_seconds,
                        inputs=input_signature(inputs), gpu_name=d.environment.gpu_name or "",
                        gpu_uuid=d.environment.gpu_uuid or "", torch_version=d.environment.torch_version or "",
                        cuda_version=d.environment.cuda_version or "", reference_kernels=launches)
    with ctx.stage("baseline_flops"):
        _add_work(baseline, reference, inputs)
    baseline.stage_seconds = dict(d.environment.stage_seconds)
    return baseline


def _time_compiled(ctx: Context, timer: Timer, reference: Any, inputs: Any) -> tuple[Any, float | None]:
    """torch.compile of the reference: (TimingStats, compile seconds), or (None, None) on failure."""
    import torch

    s = ctx.settings
    try:
        with ctx.stage("baseline_compile"):
            compiled = torch.compile(reference)
            seconds = timer.first_call_seconds(compiled, inputs)
        with ctx.stage("baseline_compiled"):
            samples = timer.time_adaptive(compiled, inputs, s.timing_trials, s.warmup_trials)
        return stats_from_samples(samples), seconds
    except Exception as exc:
        print(f"kevin-worker: torch.compile of the reference failed: {type(exc).__name__}: {exc}"[:2000],
              file=sys.stderr)
        return None, None


def _add_work(baseline: Baseline, reference: Any, inputs: Any) -> None:
    """FLOPs and minimum bytes of one forward, and the dominant dtype (speed of light)."""
    try:
        flops, outputs = count_flops(reference, snapshot(inputs))
        baseline.flops = flops
        baseline.bytes_moved = float(min_bytes(inputs, reference, outputs))
    except Exception as exc:
        print(f"kevin-worker: flop count failed: {exc}", file=sys.stderr)
    state = list(reference.parameters()) + list(reference.buffers())
    baseline.dtype = dominant_dtype(tensors_in(inputs) + state)


def input_signature(inputs: Any) -> str:
    """Shapes and dtypes of the inputs, e.g. ``float32[4096,4096], int 3`` (part of the cache key)."""
    parts = []
    for value in inputs if isinstance(inputs, (list, tuple)) else [inputs]:
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            parts.append(f"{dtype_name(value.dtype)}[{','.join(str(int(n)) for n in value.shape)}]")
        else:
            parts.append(f"{type(value).__name__} {value!r}"[:60])
    return ", ".join(parts)
