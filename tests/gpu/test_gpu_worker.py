"""The GPU worker on a real device, each job in its own isolated process: correct kernels pass with
full details; every reward hack of KEVIN.md is rejected with the right stage and reason; crash, hang
and exit are contained; repeated timing is reproducible."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import adversarial_candidate, build_arch, correct_candidate, log_record, run_job, task_source

from kevin_agent import feedback
from kevin_agent.data import Stage
from kevin_agent.evaluate.worker.timing import spread_of_medians

pytestmark = pytest.mark.gpu

FAST = {"with_torch_compile": False, "timing_trials": 20, "warmup_trials": 3}


@pytest.mark.parametrize("name", ["add", "gelu", "matmul", "softmax"])
def test_correct_kernel_passes_with_full_details(worker_pool, gpu_cache_dir, name):
    result = run_job(worker_pool, gpu_cache_dir, task_source(name), correct_candidate(name), f"correct/{name}")
    verdict, d = result.verdict, result.verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), (verdict.message, result.stderr_tail)
    assert d.correctness.trials_passed == d.correctness.trials_total == 5
    assert d.correctness.max_abs_error is not None and d.correctness.atol == 1e-4
    t = d.timing
    kernel, eager, compiled = t.kernel, t.eager, t.compiled
    assert kernel is not None and eager is not None and compiled is not None, result.stderr_tail
    assert 20 <= kernel.trials <= 100 and 20 <= eager.trials <= 100 and kernel.median_ms > 0  # adaptive
    assert kernel.ci_low_ms is not None and kernel.ci_high_ms is not None
    assert kernel.ci_low_ms <= kernel.median_ms <= kernel.ci_high_ms
    assert t.torch_compile_seconds is not None and t.torch_compile_seconds > 0, result.stderr_tail
    parts = d.environment.stage_seconds  # the baseline measured in this job says where its time went
    assert {"baseline_eager", "baseline_launches", "baseline_compile", "baseline_compiled"} <= set(parts), parts
    assert parts["baseline_compile"] >= t.torch_compile_seconds, parts
    assert t.speedup_vs_eager == pytest.approx(eager.median_ms / kernel.median_ms)
    assert t.speedup_vs_compile == pytest.approx(compiled.median_ms / kernel.median_ms)
    assert t.speedup_vs_eager is not None
    assert verdict.message.startswith(feedback.correct(t.speedup_vs_eager) + "\nGPU time of one forward call")
    assert d.provenance.ok and d.provenance.policy == "strict" and (d.provenance.own_share or 0) > 0.5, d.provenance
    launches, kernels = d.provenance.reference_launches, d.provenance.kernels or []
    assert kernels and kernels[0]["origin"] == "own" and launches and launches >= 1, kernels
    assert d.correctness.reference_error_vs_fp64 is not None and d.correctness.error_vs_fp64 is not None
    assert t.sol_fraction is not None and t.sol_ms is not None
    assert 0 < t.sol_fraction <= 1.0 and t.sol_ms == pytest.approx(t.sol_fraction * kernel.median_ms)
    assert not d.trust.suspicious, d.trust.reasons
    assert verdict.counts_as_best
    assert d.environment.gpu_name and d.environment.torch_version and d.environment.cuda_version
    if name == "matmul":
        assert d.timing.flops == 2 * 1024**3
    if name == "add":
        assert d.timing.flops == 0 and d.timing.bytes_moved == 3 * 4096 * 4096 * 4
    # the timer measures the GPU time the profiler's own record shows for one call (0.95-1.04 for
    # these four on the H200 at 1668ea8); timed_below_profile fires under a third of it
    profiled_ms = sum(row["ms"] for row in kernels)
    assert 0.8 <= kernel.median_ms / profiled_ms <= 1.25, (kernel.median_ms, kernels)


def test_uninitialised_output_cannot_inherit_the_reference(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("uninitialised_output"),
                     "adversarial/uninitialised_output", **FAST)
    verdict = result.verdict
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), verdict.message
    assert verdict.message.startswith("Your answer was incorrect:")
    assert "NaN/Inf values where the reference is finite" in verdict.message
    assert "trial 1 of 5, first candidate run" in verdict.message


def test_input_mutation_is_rejected(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("mutates_input"),
                     "adversarial/mutates_input", **FAST)
    verdict = result.verdict
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), verdict.message
    assert "modified its inputs (input 0)" in verdict.message


def test_side_stream_work_is_flagged_and_never_best(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("side_stream"),
                     "adversarial/side_stream", **FAST)
    verdict, d = result.verdict, result.verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), verdict.message  # results are right
    assert d.trust.suspicious and any("escapes the timed stream" in r for r in d.trust.reasons), d.trust.reasons
    assert not verdict.counts_as_best and not verdict.correct and not verdict.trusted
    assert "escaped_stream" in [f.name for f in d.trust.flags], d.trust.flags
    assert verdict.message.startswith("Your answer was not trusted, so it counts as incorrect and earned nothing: ")


def test_constant_output_fails_even_inside_tolerance(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("tiny_values"), adversarial_candidate("constant_output"),
                     "adversarial/constant_output", **FAST)
    verdict = result.verdict
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), verdict.message
    assert "output 0 is constant (every element is 0)" in verdict.message


def test_patched_timing_is_rejected_at_load(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("patched_timing"),
                     "adversarial/patched_timing", **FAST)
    verdict = result.verdict
    assert (verdict.stage, verdict.ok) == (Stage.LOAD, False), verdict.message
    assert "torch.cuda.Event.elapsed_time" in verdict.message and "not allowed" in verdict.message
    assert verdict.details.timing.kernel is None  # never timed


def test_illegal_memory_access_becomes_a_load_verdict(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("illegal_access"),
                     "adversarial/illegal_access", **FAST)
    verdict = result.verdict
    assert not result.crashed, result.stderr_tail  # the worker itself reported it
    assert (verdict.stage, verdict.ok) == (Stage.LOAD, False)
    assert verdict.message.startswith("Your answer compiled but raised an error at run time")
    assert "illegal memory access" in verdict.message


def test_os_exit_is_contained(worker_pool, gpu_cache_dir):
    result = run_job(worker_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("exits"),
                     "adversarial/exits", **FAST)
    assert result.crashed and result.returncode == 0
    assert (result.verdict.stage, result.verdict.ok) == (Stage.LOAD, False)
    assert "exited without writing a result" in result.verdict.message


def test_hang_is_killed_and_the_next_candidate_evaluates(gpu_cache_dir):
    from gpu_helpers import run_job as run

    from kevin_agent.evaluate.isolation import WorkerPool

    with WorkerPool(run_timeout_s=40.0) as pool:
        hung = run(pool, gpu_cache_dir, task_source("add"), adversarial_candidate("hang"), "adversarial/hang", **FAST)
        assert hung.crashed and (hung.verdict.stage, hung.verdict.ok) == (Stage.LOAD, False)
        assert "timed out after 40 s" in hung.verdict.message
        after = run(pool, gpu_cache_dir, task_source("add"), correct_candidate("add"), "after-hang/add", **FAST)
    assert (after.verdict.stage, after.verdict.ok) == (Stage.TIMING, True), after.verdict.message


def test_timing_is_reproducible_across_five_rounds(worker_pool, gpu_cache_dir):
    medians = []
    for round_index in range(5):
        result = run_job(worker_pool, gpu_cache_dir, task_source("matmul"), correct_candidate("matmul"),
                         f"stability/{round_index}", with_torch_compile=False, correctness_trials=1)
        assert result.verdict.ok, result.verdict.message
        kernel = result.verdict.details.timing.kernel
        assert kernel is not None, result.verdict.message
        medians.append(kernel.median_ms)
    assert min(medians) >= 0.1, medians
    assert spread_of_medians(medians) <= 0.02, medians


def test_the_lead_in_holds_the_device_for_the_time_asked():
    """``Clock.hold`` (a GPU sleep before each start event) really keeps the device busy: without it
    a call made on an idle device times the host issuing it."""
    import torch

    from kevin_agent.evaluate.worker import guards
    from kevin_agent.evaluate.worker.timing import Clock, device_cycles_per_ms

    device = torch.device("cuda", torch.cuda.current_device())
    cycles_per_ms = device_cycles_per_ms(device)
    assert cycles_per_ms > 100_000, cycles_per_ms  # over 100 MHz: a clock, not a unit mistake
    clock = Clock.from_captured(guards.capture_references(), torch.cuda.current_stream(device), cycles_per_ms)
    clock.hold(0.01)  # loads the sleep kernel
    start, end = clock.event(), clock.event()
    clock.record(start, clock.stream)
    clock.hold(0.5)
    clock.record(end, clock.stream)
    clock.synchronize()
    assert 0.4 <= clock.elapsed_time(start, end) <= 5.0  # at a lower real clock it lasts longer


def _baseline_on_a_lane(cache_dir: Path, ahead: bool, measure: bool = True) -> tuple[Any, Any]:
    """(the compile-ahead job's result or None, the baseline job's result or None without
    ``measure``) for the gelu task, in confined workers of a real lane whose caches live under
    ``cache_dir`` (closed after: a kept worker goes with it)."""
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.lanes import LocalLane, local_devices
    from kevin_agent.evaluate.protocol import WorkerJob

    settings = EvalSettings(arch=build_arch(), cache_dir=cache_dir, timing_trials=20, warmup_trials=3)
    lane = LocalLane(local_devices()[0], settings, spares=0, cache_dir=cache_dir)
    job = WorkerJob(task_source("gelu"), "", Path("unset"), settings, cache_dir=cache_dir)
    try:
        built = lane.compile_ahead(dataclasses.replace(job, compile_ahead=True)) if ahead else None
        return built, lane.run(dataclasses.replace(job, measure_baseline=True)) if measure else None
    finally:
        lane.close()


def test_a_baseline_job_runs_the_build_its_worker_made_ahead(tmp_path):
    """Issue 20: the job ahead builds off the lease and its worker stays; the baseline job runs
    there, under the lease, on that build: nothing compiled or loaded then. The control, a cold
    lane, builds under the lease."""
    built, measured = _baseline_on_a_lane(tmp_path / "ahead", ahead=True)
    assert built is not None and built.compiled_ahead is not None, (built and built.stderr_tail)
    assert built.compiled_ahead.ok and built.compiled_ahead.waits_for_baseline, (built.compiled_ahead.error,
                                                                                 built.stderr_tail)
    _, cold = _baseline_on_a_lane(tmp_path / "cold", ahead=False)
    seconds = {}
    for name, result in (("on its build", measured), ("cold", cold)):
        baseline = result.baseline
        assert baseline is not None and baseline.compiled is not None, result.stderr_tail
        seconds[name] = baseline.stage_seconds.get("baseline_compile")
    log_record({"event": "compile_ahead_kept", "ahead_parts": built.compiled_ahead.stage_seconds,
                "baseline_compile_s": seconds, "baseline_parts": measured.baseline.stage_seconds,
                "cold_parts": cold.baseline.stage_seconds, "cache_files": _cache_files(tmp_path / "ahead")})
    assert measured.pid == built.pid and measured.baseline.built_ahead is True
    assert cold.baseline.built_ahead is False and cold.baseline.compile_cache_hit is False
    assert seconds["on its build"] < seconds["cold"] / 2, seconds


def test_a_baseline_on_another_worker_loads_the_build_from_the_caches(tmp_path):
    """The fallback where the kept worker is gone (closed here): a fresh worker's torch.compile
    loads the job ahead's graphs from the shared caches under <cache>/inductor."""
    cache_dir = tmp_path / "cache"
    built, _ = _baseline_on_a_lane(cache_dir, ahead=True, measure=False)
    assert built is not None and built.compiled_ahead is not None and built.compiled_ahead.ok, \
        (built and built.stderr_tail)
    _, measured = _baseline_on_a_lane(cache_dir, ahead=False)
    log_record({"event": "compile_ahead_cache", "baseline_parts": measured.baseline and measured.baseline.stage_seconds,
                "cache_files": _cache_files(cache_dir), "stderr": measured.stderr_tail[-1500:]})
    assert measured.baseline is not None and measured.baseline.compiled is not None, measured.stderr_tail
    assert measured.pid != built.pid and measured.baseline.built_ahead is False
    assert measured.baseline.compile_cache_hit is True, _cache_files(cache_dir)


def _cache_files(cache_dir: Path) -> dict[str, int]:
    """Files under each of torch.compile's cache folders (what a job ahead left there)."""
    return {folder.name: sum(1 for f in folder.rglob("*") if f.is_file())
            for folder in sorted(cache_dir.iterdir()) if folder.is_dir()} if cache_dir.is_dir() else {}


def test_compile_ahead_and_baseline_steps_share_their_cache_keys(tmp_path):
    """The same two steps in plain processes (no sandbox, no lane): the baseline step's torch.compile
    must look up the keys the step ahead stored. On a miss the log names the key components that
    differ, so the cause shows without another run."""
    import json
    import os
    import subprocess
    import sys

    from compile_cache_steps import differing_components, key_hashes

    root = Path(__file__).resolve().parents[2]
    task = tmp_path / "task.py"
    task.write_text(task_source("gelu"))
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONPATH=path)
    steps = {}
    for step in ("ahead", "measure"):
        scratch = tmp_path / step
        scratch.mkdir()
        out = subprocess.run([sys.executable, str(root / "tests" / "compile_cache_steps.py"), step, str(scratch),
                              str(task), "cuda"], capture_output=True, text=True, env=env, cwd=root, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        steps[step] = json.loads(out.stdout.strip().splitlines()[-1])
    ahead, measured = steps["ahead"], steps["measure"]
    differing = differing_components(ahead["keys"], measured["keys"])
    log_record({"event": "compile_cache_keys", "ahead_keys": key_hashes(ahead["keys"]),
                "measure_keys": key_hashes(measured["keys"]), "differing": [line[:300] for line in differing[:40]],
                "warnings": ahead["warnings"] + measured["warnings"], "hit": measured["hit"],
                "ahead_ok": ahead["ok"], "ahead_error": ahead["error"], "cache_files": _cache_files(tmp_path)})
    assert ahead["ok"] is True and ahead["ran"] == 0, ahead["error"]
    assert measured["hit"] is True, (differing[:10], measured["warnings"])
    assert differing == []
