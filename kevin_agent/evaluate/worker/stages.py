"""The worker's job: a baseline (the reference timed once), torch.compile of it built ahead, or a
candidate's stages (load, correctness, provenance, timing against the baseline, speed of light)
-> one ``WorkerReply``.

Runs inside the isolated worker process only (it executes model-written code).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, VerdictDetails, flag_untrusted
from kevin_agent.evaluate.protocol import Baseline, WorkerJob, WorkerReply
from kevin_agent.evaluate.provenance.policy import profile_feedback
from kevin_agent.evaluate.worker.baseline import BuiltAhead, compile_ahead, limit_ahead_memory, measure_baseline
from kevin_agent.evaluate.worker.context import Context, TaskProblem, environment_details, load_reference
from kevin_agent.evaluate.worker.correctness import (
    CorrectnessHarness,
    Fp64Reference,
    RefusedOutput,
    check_outputs,
    flatten_outputs,
    keep_output,
    make_inputs,
    refill_inputs,
    run_correctness,
)
from kevin_agent.evaluate.worker.guards import CapturedReferences, snapshot
from kevin_agent.evaluate.worker.loader import (
    describe_exception,
    install_build_hook,
    load_module_from_file,
    raised_by_generated_code,
)
from kevin_agent.evaluate.worker.provenance import ProvenanceInputs, check_provenance, generated_code_rejection
from kevin_agent.evaluate.worker.speed_of_light import PeakRates, load_or_measure_peaks, sol_ms, timing_flags
from kevin_agent.evaluate.worker.timing import (
    TIMING_POOL_SETS,
    Clock,
    Rotation,
    Timer,
    device_cycles_per_ms,
    escape_reason,
    escape_trials,
    make_flush,
    profile_disagreement,
    stats_from_samples,
)

__all__ = ["TaskProblem", "baseline_after_build", "build_ahead", "evaluate_job"]


def _context(job: WorkerJob, captured: CapturedReferences, device: Any, stream: Any, scratch: Path) -> Context:
    clock = Clock.from_captured(captured, stream, device_cycles_per_ms(device))
    return Context(captured, clock, device, job.settings, environment_details(device), scratch / "candidate.py",
                   make_flush(device))


def _scratch(job: WorkerJob) -> Path:
    return Path(job.scratch_dir or tempfile.mkdtemp(prefix="kevin-worker-"))


def evaluate_job(job: WorkerJob, cache_dir: Path, captured: CapturedReferences, device: Any,
                 stream: Any) -> WorkerReply:
    """A candidate's or a baseline job's reply (a compile-ahead job goes to ``build_ahead``).
    Raises TaskProblem when the reference itself fails."""
    scratch = _scratch(job)
    try:
        ctx = _context(job, captured, device, stream, scratch)
        if job.witness_path is not None and not job.measure_baseline:
            from kevin_agent.evaluate.judge_wire import WitnessWriter

            ctx.witness = WitnessWriter(job.witness_path)  # its folder made before any candidate code
        with ctx.stage("reference"):
            peaks = None if job.measure_baseline else _peaks(cache_dir, ctx)  # before candidate code runs
            task, reference, init_inputs = load_reference(job.task_source, scratch, ctx)
        if job.measure_baseline:
            return WorkerReply(baseline=measure_baseline(ctx, task, reference))
        if job.baseline is None:
            with ctx.stage("baseline"):
                baseline = measure_baseline(ctx, task, reference)
        else:
            baseline = job.baseline
        verdict = _evaluate_candidate(job, cache_dir, ctx, (task, reference, init_inputs), baseline, peaks)
        verdict.details.timing.baseline_cached = job.baseline is not None
        return WorkerReply(verdict=verdict)
    finally:
        if job.scratch_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


def build_ahead(job: WorkerJob, captured: CapturedReferences, device: Any,
                stream: Any) -> tuple[WorkerReply, BuiltAhead | None]:
    """A compile-ahead job: the reply, and the build where torch.compile made one (the worker may
    keep it for the task's baseline job: ``baseline_after_build``). Raises TaskProblem when the
    reference itself fails."""
    ctx = _context(job, captured, device, stream, _scratch(job))
    limit_ahead_memory(device)  # before the reference takes any
    with ctx.stage("reference"):
        task, reference, _ = load_reference(job.task_source, ctx.candidate_path.parent, ctx)
    done, built = compile_ahead(ctx, task, reference)
    return WorkerReply(compiled_ahead=done), built


def baseline_after_build(job: WorkerJob, built: BuiltAhead, captured: CapturedReferences, device: Any,
                         stream: Any) -> WorkerReply:
    """The task's baseline job in the worker that built its torch.compile ahead: the memory cap
    lifted, the same reference timed, its build released and timed (nothing compiled under the lease)."""
    limit_ahead_memory(device, 1.0)
    ctx = _context(job, captured, device, stream, _scratch(job))
    return WorkerReply(baseline=measure_baseline(ctx, built.task, built.reference, built))


def _evaluate_candidate(job: WorkerJob, cache_dir: Path, ctx: Context, loaded: tuple[Any, Any, Any],
                        baseline: Baseline, peaks: PeakRates | None) -> Verdict:
    task, reference, init_inputs = loaded
    with ctx.stage("load"):
        candidate = _load_candidate(job, cache_dir, ctx, task, init_inputs)
    if isinstance(candidate, Verdict):
        return candidate
    with ctx.stage("correctness"):
        verdict = _correctness(ctx, task, reference, candidate)
    if verdict is not None:
        return verdict
    rotation = timing_rotation(ctx, task)
    try:
        with ctx.stage("provenance"):
            verdict = check_provenance(ctx, ProvenanceInputs(
                task, reference, candidate, baseline.reference_kernels, ctx.extensions,
                lambda: _hints(job.candidate_source, job.task_source), rotation))
    except RefusedOutput as refused:
        return ctx.fail(Stage.CORRECTNESS, feedback.incorrect(f"{refused} (a timed call)"), str(refused))
    if verdict is not None:
        return verdict  # rejected by what ran on the GPU: no timing spent
    settle_flags(ctx.details)  # provenance may have flagged it (not checked)
    if ctx.settings.timing_trials <= 0:
        message = _with_profile(_passed_message(ctx.details, feedback.correct_untimed()), ctx)
        return _served(ctx, candidate, Verdict(Stage.PROVENANCE, True, message, ctx.details))
    with ctx.stage("timing"):
        verdict = _timing(ctx, candidate, baseline, peaks, reference, rotation)
    return _served(ctx, candidate, verdict)


def _served(ctx: Context, candidate: Any, verdict: Verdict) -> Verdict:
    """When the verdict passed here, the judge runs and reads the candidate's calls itself
    (``observe``): this process only serves it; the judge's observation decides. The channel is
    closed either way, so the judge never waits on a worker that has nothing to show."""
    from kevin_agent.evaluate.observe.served import serve
    from kevin_agent.evaluate.observe.transport import transport_for
    from kevin_agent.evaluate.observe.wire import FOLDER_ENV, Channel, ChannelError

    channel = Channel.from_env()
    if channel is None:
        return verdict
    try:
        if verdict.passed:
            with ctx.stage("observed"):
                folder = os.environ.get(FOLDER_ENV)
                transport = transport_for(ctx.device, Path(folder) if folder else None)
                kernel = ctx.details.timing.kernel
                why = serve(channel, transport, candidate, kernel.median_ms if kernel is not None else None)
            if why:
                print(f"kevin-worker: the observation ended: {why}", file=sys.stderr, flush=True)
    except ChannelError as exc:
        print(f"kevin-worker: no observation: {exc}", file=sys.stderr, flush=True)
    finally:
        channel.close()
    return verdict


def _hints(source: str, task_source: str) -> list[str]:
    """The static compute rules' hints for ``source`` ("line N: ... [rule]")."""
    from kevin_agent.evaluate.static.checks import format_violations, hints_for

    return format_violations(hints_for(source, task_source), limit=1000).splitlines()


def _with_profile(message: str, ctx: Context) -> str:
    """A correct candidate's feedback plus its kernel table and speed-of-light fraction."""
    if ctx.provenance is None:
        return message
    return message + "\n" + profile_feedback(ctx.provenance, ctx.details.timing.sol_fraction)


def _peaks(cache_dir: Path, ctx: Context) -> PeakRates | None:
    try:
        return load_or_measure_peaks(cache_dir, ctx.clock, ctx.device, ctx.flush)
    except Exception as exc:  # speed of light is advisory: report without it
        print(f"kevin-worker: speed-of-light peaks unavailable: {exc}", file=sys.stderr)
        return None


def _with_denial(text: str, exc: BaseException) -> str:
    """The error, and when the sandbox refused it (the error or one it chains to), a line saying so."""
    from kevin_agent.evaluate.sandbox import explain_denial

    note, current, seen = None, exc, 0  # type: tuple[str | None, BaseException | None, int]
    while note is None and current is not None and seen < 8:
        note, current, seen = explain_denial(current), current.__cause__ or current.__context__, seen + 1
    return f"{text}\n{note}" if note else text


def _failure(ctx: Context, stage: Stage, exc: BaseException) -> Verdict:
    """A verdict for an exception out of the candidate's code: a provenance rejection when it came
    from torch.compile or Triton (generated code, stopped by the sandbox or a failed compile),
    else a run-time error at ``stage``."""
    text = _with_denial(describe_exception(exc, ctx.candidate_path), exc)
    if raised_by_generated_code(exc):
        return generated_code_rejection(ctx, text)
    return ctx.fail(stage, feedback.runtime_error(text), text)


def confine_candidate(job: WorkerJob, cache_dir: Path) -> str:
    """The candidate layer of the sandbox, right before the candidate's first line: read only
    its own build entries, write only the job folder, no processes, no sockets. How it went."""
    from kevin_agent.evaluate.build.cache import entry_dir
    from kevin_agent.evaluate.sandbox import confine, current_report, worker_policy

    mode = job.settings.sandbox
    if mode == "off":
        return "off"
    start = current_report()
    entries = list(job.build_entries) or [str(entry_dir(cache_dir, ""))]  # no list: every entry
    policy = worker_policy(job.result_path.parent, entries, protect=job.protect, devices=granted_devices())
    report = confine(policy, mode)  # a SandboxMode, parsed with the settings
    applied = report.applied
    if start is not None:  # both layers on the record, even when they read the same
        applied += f" (start-up: {start.applied})"
    return applied


def granted_devices() -> list[str] | None:
    """The device nodes the parent listed for this worker (``DEVICES_ENV``): under the start-up
    layer /dev cannot be listed, so ``/dev/nvidia*`` would find nothing here. None when unset
    (an unconfined worker lists /dev itself)."""
    from kevin_agent.evaluate.sandbox.policy import DEVICES_ENV

    raw = os.environ.get(DEVICES_ENV)
    if raw is None:
        return None
    return [path for path in raw.split(os.pathsep) if path.startswith("/dev/")]


def _load_candidate(job: WorkerJob, cache_dir: Path, ctx: Context, task: Any, init_inputs: Any) -> Any:
    """ModelNew on the device after one forward, or a LOAD verdict."""
    import torch

    from kevin_agent.evaluate.build.flags import resolve_arch

    # the builds' own resolution (argument, TORCH_CUDA_ARCH_LIST, device), so the cache keys match
    note = install_build_hook(cache_dir, resolve_arch(job.settings.arch), ctx.extensions)
    if isinstance(note, str):
        print(f"kevin-worker: {note}", file=sys.stderr)
    ctx.details.environment.sandbox = confine_candidate(job, cache_dir)
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
        inputs = make_inputs(task.get_inputs, ctx.device)
        ctx.poison()
        with torch.no_grad():
            candidate(*snapshot(inputs))
        ctx.clock.synchronize()
        if ctx.patched():
            return ctx.fail(Stage.LOAD, ctx.patched() or "")
    except Exception as exc:
        return _failure(ctx, Stage.LOAD, exc)
    return candidate


def _correctness(ctx: Context, task: Any, reference: Any, candidate: Any) -> Verdict | None:
    """None when correct; else the failing verdict."""
    harness = CorrectnessHarness(
        reference=reference, candidate=candidate, get_inputs=task.get_inputs, device=ctx.device,
        seed_all=ctx.seed_all, synchronize=ctx.clock.synchronize, poison=ctx.poison,
        check_patched=ctx.patched, reference64=Fp64Reference(reference),
        witness=ctx.witness.record if ctx.witness is not None else None,
        parts={}, clock=ctx.clock.perf_counter,
    )
    trials = max(1, ctx.settings.correctness_trials)
    try:
        result = run_correctness(harness, trials, ctx.settings.seed)
    except Exception as exc:
        ctx.details.correctness.trials_total = trials
        return _failure(ctx, Stage.CORRECTNESS, exc)
    finally:  # where the stage's time went (issue 20), whatever it found
        ctx.details.environment.stage_seconds.update(
            {f"correctness_{name}": round(seconds, 4) for name, seconds in (harness.parts or {}).items()})
    c = ctx.details.correctness
    c.trials_passed, c.trials_total = result.trials_passed, result.trials_total
    c.max_abs_error, c.max_rel_error = result.max_abs_error, result.max_rel_error
    c.atol, c.rtol = result.atol, result.rtol
    c.error_vs_fp64, c.reference_error_vs_fp64 = result.error_vs_fp64, result.reference_error_vs_fp64
    c.rms_error_vs_fp64, c.reference_rms_error_vs_fp64 = result.rms_error_vs_fp64, result.reference_rms_error_vs_fp64
    c.fp64_accepted = result.fp64_accepted if result.error_vs_fp64 is not None else None
    c.input_sets = result.input_sets or None
    if result.ok:
        return None
    message = result.message if result.patched else feedback.incorrect(result.message)
    return ctx.fail(Stage.CORRECTNESS, message, "\n".join(result.problems))


def timing_rotation(ctx: Context, task: Any) -> Rotation:
    """``TIMING_POOL_SETS`` input sets from unpredictable seeds, rotated through one set of
    staging buffers; outputs sampled at random after each call returns (issue 19)."""
    import random

    seeded = [ctx.unpredictable_inputs(task) for _ in range(TIMING_POOL_SETS)]
    pool = [tuple(inputs) for _, inputs in seeded]
    return Rotation(pool, snapshot(pool[0]), refill_inputs, keep_output, random.SystemRandom().random,
                    settle=ctx.clock.synchronize, seeds=[seed for seed, _ in seeded])


def _timed_problems(ctx: Context, reference: Any, rotation: Rotation) -> list[str]:
    """The kept outputs of timed calls against the reference on the same input sets."""
    harness = CorrectnessHarness(reference=reference, candidate=None, get_inputs=list, device=ctx.device,  # type: ignore[arg-type]
                                 seed_all=ctx.seed_all, synchronize=ctx.clock.synchronize, poison=ctx.poison,
                                 reference64=Fp64Reference(reference))
    problems: list[str] = []
    for index, got in rotation.kept:
        where = f"a timed call, input set {index + 1}"
        if ctx.witness is not None and index < len(rotation.seeds):
            ctx.witness.record(rotation.seeds[index], where, flatten_outputs(got))
        problems += check_outputs(harness, rotation.pool[index], got, where)
    return problems


def _timing(ctx: Context, candidate: Any, baseline: Baseline, peaks: PeakRates | None, reference: Any,
            rotation: Rotation) -> Verdict:
    """The candidate timed (adaptive trials, L2 flushed) against the baseline's medians, on input
    sets rotated per call; a random sample of the timed outputs (and of the profiled call's)
    checked against the reference."""
    s, d = ctx.settings, ctx.details
    t = d.timing
    timer = Timer(ctx.clock, ctx.flush)
    t.eager, t.compiled, t.torch_compile_seconds = baseline.eager, baseline.compiled, baseline.torch_compile_seconds
    try:
        kernel = t.kernel = stats_from_samples(timer.time_adaptive(candidate, rotation, s.timing_trials,
                                                                   s.warmup_trials))
        synced = stats_from_samples(timer.time_synced(candidate, rotation, escape_trials(s.timing_trials)))
        escape = escape_reason(kernel.median_ms, synced.median_ms, timer.sync_overhead_ms())
        problems = _timed_problems(ctx, reference, rotation)
    except RefusedOutput as refused:
        return ctx.fail(Stage.CORRECTNESS, feedback.incorrect(f"{refused} (a timed call)"), str(refused))
    except Exception as exc:
        return _failure(ctx, Stage.TIMING, exc)
    patched = ctx.patched()
    if patched:
        return ctx.fail(Stage.CORRECTNESS, patched)
    if problems:
        return ctx.fail(Stage.CORRECTNESS, feedback.incorrect(problems[0]), "\n".join(problems))
    if kernel.median_ms > 0:
        t.speedup_vs_eager = baseline.eager.median_ms / kernel.median_ms
        if baseline.compiled is not None:
            t.speedup_vs_compile = baseline.compiled.median_ms / kernel.median_ms
    _speed_of_light(ctx, baseline, peaks)
    profile = profile_disagreement(kernel.median_ms, ctx.provenance.total_ms if ctx.provenance else None)
    for name, reason in timing_flags(t.sol_fraction, t.speedup_vs_eager, escape, kernel.median_ms, t.sol_ms, profile):
        flag_untrusted(d, name, reason)
    message = _passed_message(d, feedback.correct(t.speedup_vs_eager or 0.0))
    return Verdict(Stage.TIMING, True, _with_profile(message, ctx), d)


def settle_flags(d: VerdictDetails) -> None:
    """Give every recorded reason not to trust the result its flag name (the provenance stage
    records "provenance not checked" as a reason only), so the stored verdict names them."""
    d.trust.flags = d.all_trust_flags()
    d.trust.suspicious = d.trust.suspicious or bool(d.trust.flags)


def _passed_message(d: VerdictDetails, trusted_message: str) -> str:
    """The feedback of a candidate that passed: ``trusted_message``, or when a trust check fired,
    the rejection that says what tripped and that it earned nothing."""
    flags = d.all_trust_flags()
    return feedback.untrusted([f.reason for f in flags]) if flags else trusted_message


def _speed_of_light(ctx: Context, baseline: Baseline, peaks: PeakRates | None) -> None:
    t = ctx.details.timing
    t.flops, t.bytes_moved = baseline.flops, baseline.bytes_moved
    if peaks is None or t.kernel is None or t.kernel.median_ms <= 0 or t.flops is None or t.bytes_moved is None:
        return
    t.sol_ms = sol_ms(t.flops, t.bytes_moved, peaks.flops_for(baseline.dtype), peaks.bandwidth_bytes_per_s)
    t.sol_fraction = t.sol_ms / t.kernel.median_ms
