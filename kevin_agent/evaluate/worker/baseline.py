"""The baseline job: the reference timed once per task, GPU and settings (eager and torch.compile,
adaptive trials, L2 flushed), with what the speed of light needs and the reference's GPU launch
count (provenance's partial policy), reused for every candidate.

The compile-ahead job comes before it, off the GPU's lease: torch.compile builds the reference
(Inductor's code, its Triton kernels, into the shared caches too) and runs nothing; its worker keeps
the build and the baseline job under the lease runs there, on it (``Baseline.built_ahead``), or, in
a fresh worker, loads it from the caches (``Baseline.compile_cache_hit``; docs/eval.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from kevin_agent.evaluate.protocol import Baseline, CompiledAhead
from kevin_agent.evaluate.worker.context import Context, TaskProblem
from kevin_agent.evaluate.worker.guards import snapshot
from kevin_agent.evaluate.worker.loader import describe_exception
from kevin_agent.evaluate.worker.provenance import provenance_inputs, reference_launches
from kevin_agent.evaluate.worker.speed_of_light import count_flops, dominant_dtype, dtype_name, min_bytes, tensors_in
from kevin_agent.evaluate.worker.timing import Timer, stats_from_samples

# A compile-ahead job shares the GPU with whatever is leased there: its reference and inputs may
# take at most this share of the device's memory (more fails it at once, and the baseline job
# compiles under the lease as before), so it cannot run a candidate beside it out of memory.
AHEAD_MEMORY_FRACTION = 1 / 16


def measure_baseline(ctx: Context, task: Any, reference: Any, built: BuiltAhead | None = None) -> Baseline:
    """Time the reference (eager, then torch.compile: ``built``'s build where this worker made it
    ahead, else built now); TaskProblem when eager itself fails. Each part's seconds go into
    ``stage_seconds`` (``baseline_eager``, ``baseline_launches``, ``baseline_compile``,
    ``baseline_compiled``, ``baseline_flops``): where a baseline job's time goes."""
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
    compiled, compile_seconds, cache_hit = _time_compiled(ctx, timer, reference, snapshot(inputs), built) \
        if s.with_torch_compile else (None, None, None)
    baseline = Baseline(eager=eager, compiled=compiled, torch_compile_seconds=compile_seconds,
                        inputs=input_signature(inputs), gpu_name=d.environment.gpu_name or "",
                        gpu_uuid=d.environment.gpu_uuid or "", torch_version=d.environment.torch_version or "",
                        cuda_version=d.environment.cuda_version or "", reference_kernels=launches,
                        compile_cache_hit=cache_hit, built_ahead=built is not None and compiled is not None)
    with ctx.stage("baseline_flops"):
        _add_work(baseline, reference, inputs)
    baseline.stage_seconds = dict(d.environment.stage_seconds)
    return baseline


def _time_compiled(ctx: Context, timer: Timer, reference: Any, inputs: Any,
                   built: BuiltAhead | None = None) -> tuple[Any, float | None, bool | None]:
    """torch.compile of the reference: (TimingStats, compile seconds, whether the build came from
    the caches: ``_served_from_cache``), or (None, None, None) on failure. With ``built`` its
    build runs (released now) and the seconds are its build's plus the first call's."""
    import torch

    s = ctx.settings
    try:
        with ctx.stage("baseline_compile"):
            before = _cache_counts()
            if built is not None:
                built.backend.released = True
                compiled = built.compiled
            else:
                compiled = torch.compile(reference)
            seconds = timer.first_call_seconds(compiled, inputs) + (built.seconds if built else 0.0)
            cache_hit = _served_from_cache(before, _cache_counts())
        with ctx.stage("baseline_compiled"):
            samples = timer.time_adaptive(compiled, inputs, s.timing_trials, s.warmup_trials)
        return stats_from_samples(samples), seconds, cache_hit
    except Exception as exc:
        print(f"kevin-worker: torch.compile of the reference failed: {type(exc).__name__}: {exc}"[:2000],
              file=sys.stderr)
        return None, None, None


def limit_ahead_memory(device: Any, fraction: float = AHEAD_MEMORY_FRACTION) -> None:
    """Cap this process's GPU memory for a compile-ahead job (``AHEAD_MEMORY_FRACTION``); 1.0 lifts
    the cap again for the baseline job that follows it in the same worker."""
    import torch

    torch.cuda.set_per_process_memory_fraction(fraction, device)


class _Built(Exception):
    """Raised where the compiled reference would run before its baseline job released it."""


class _Deferred:
    """A torch.compile backend: torch.compile's default (Inductor, no mode or options), which builds
    the graph exactly as ``torch.compile(reference)`` would (into the shared caches too); what it
    returns refuses to run until ``released`` (the baseline job, under the GPU's lease)."""

    def __init__(self) -> None:
        from torch import _TorchCompileInductorWrapper

        self.inductor = _TorchCompileInductorWrapper(None, None, None)
        self.released = False

    def __call__(self, graph: Any, example_inputs: Any) -> Any:
        compiled = self.inductor(graph, example_inputs)

        def run(*args: Any, **kwargs: Any) -> Any:
            if not self.released:
                raise _Built()
            return compiled(*args, **kwargs)

        if getattr(compiled, "_boxed_call", False):  # called with one list of arguments, as Inductor's
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def __getattr__(self, name: str) -> Any:  # what dynamo asks of a backend, answered as Inductor's
        return getattr(self.inductor, name)


@dataclass
class BuiltAhead:
    """A compile-ahead job's build, kept in its worker for the task's baseline job: the reference it
    compiled, ``torch.compile(reference)`` with its graphs built, its backend, and the build's seconds."""

    task: Any
    reference: Any
    compiled: Any
    backend: _Deferred
    seconds: float


def compile_ahead(ctx: Context, task: Any, reference: Any) -> tuple[CompiledAhead, BuiltAhead | None]:
    """torch.compile's build of the reference on the timing inputs (seeded as the baseline job's),
    stopped before the compiled graph runs; with the build when it was made. Never raises."""
    import torch

    def parts() -> dict[str, float]:
        return dict(ctx.details.environment.stage_seconds)

    inputs = ctx.timing_inputs(task)
    backend = _Deferred()
    try:
        with ctx.stage("baseline_compile_ahead"):
            compiled = torch.compile(reference, backend=backend)
            with torch.no_grad():
                compiled(*snapshot(inputs))
    except _Built:
        seconds = parts().get("baseline_compile_ahead", 0.0)
        return CompiledAhead(True, stage_seconds=parts()), BuiltAhead(task, reference, compiled, backend, seconds)
    except Exception as exc:
        return CompiledAhead(False, f"{type(exc).__name__}: {exc}".splitlines()[0][:500], parts()), None
    return CompiledAhead(False, "torch.compile ran the reference without a graph to build", parts()), None


def _cache_counts() -> dict[str, int]:
    """Hits and misses so far of torch.compile's graph caches: AOT autograd's (``aot_*``) and
    Inductor's FX graphs (``fx_*``, the costly build)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    aot, inductor = counters["aot_autograd"], counters["inductor"]
    return {"aot_hit": int(aot["autograd_cache_hit"]), "aot_miss": int(aot["autograd_cache_miss"]),
            "fx_hit": int(inductor["fxgraph_cache_hit"]), "fx_miss": int(inductor["fxgraph_cache_miss"])}


def _served_from_cache(before: dict[str, int], after: dict[str, int]) -> bool | None:
    """Whether a compile between two ``_cache_counts`` came from the caches: False when Inductor
    built a graph (or AOT autograd missed and nothing hit), True when a cache served it, None when
    it asked neither (a cache bypassed, or the counters are gone)."""
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in ("aot_hit", "aot_miss", "fx_hit", "fx_miss")}
    if delta["fx_miss"] > 0:
        return False
    if delta["aot_hit"] + delta["fx_hit"] > 0:
        return True
    return False if delta["aot_miss"] > 0 else None


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
