"""Issue 9 on a real GPU, each job in its own isolated worker: kernel provenance rejects the "too
lax" families (work done by PyTorch, cuBLAS or generated code behind a token kernel of the
candidate's own) and accepts own-kernel candidates in the common styles under both policies; the
partial policy keeps a cuDNN convolution but not a fallback; KernelBench's example answers pass and
its adversarial kernels fail; correctness is judged against a float64 run.

Fixtures: tests/fixtures/provenance_gpu/ (README), tests/fixtures/kernelbench/ (README).
Candidates are compiled once into a build cache that survives between pytest runs on the same
machine (``KEVIN_GPU_TEST_CACHE``, default ``$TMPDIR/kevin-gpu-provenance-cache``), so the groups can
be run in separate commands:

    pytest tests/gpu/test_gpu_provenance.py -k "lax"                  # the too-lax families
    pytest tests/gpu/test_gpu_provenance.py -k "style or partial"     # own styles, partial policy
    pytest tests/gpu/test_gpu_provenance.py -k "kernelbench or fp64 or underflow or profiling"
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import REPO, log_record

from kevin_agent.data import Stage, Verdict
from kevin_agent.evaluate.isolation import WorkerResult

pytestmark = pytest.mark.gpu

PROV = REPO / "tests" / "fixtures" / "provenance_gpu"
KB = REPO / "tests" / "fixtures" / "kernelbench"
FAST = {"with_torch_compile": False, "timing_trials": 10, "warmup_trials": 2, "correctness_trials": 3}

LAX = ("self_attr", "class_attr", "default_arg", "dict_lookup", "map_partial", "operator_module", "torch_dict",
       "autograd_utils", "call_impl", "cpp_adl", "cpp_define", "cpp_pybind", "cpp_cublas_tokens")
JUDGE = REPO / "tests" / "fixtures" / "judge_gpu"
STYLES = {  # candidate -> task
    "style_dispatch_guard_stream": "scale_relu", "style_float4_constant_positional": "add_scale",
    "style_half": "half_gelu", "style_shared_cub": "row_sum", "style_cooperative_groups": "row_sum",
    "style_two_extensions": "add_scale",
}
HONEST = {"honest_split_k_atomics": "mm", "honest_relaid_weights": "linear",  # issue 19's look-alikes
          "honest_bandwidth_limit": "scale_relu_big", "honest_cuda_graph": "scale_relu",
          "honest_wmma_half_gemm": "half_mm"}
PARTIAL = ("partial_cudnn_epilogue", "partial_token_fallback", "partial_compile_fallback")
FP64 = ("matmul_other_order", "matmul_tf32_inputs", "prod_flush_to_zero")
KB_EXAMPLES = ("add", "fuse_gelu", "tiled_matmul", "flash_attn", "mnist2")
KB_ADVERSARIAL = ("non_default_stream_kernel", "result_reuse_kernel", "zero_out_kernel")


def all_candidates() -> dict[str, str]:
    """label -> source of every candidate these tests run."""
    found = {f"prov/{p.stem}": p.read_text() for p in PROV.glob("*.py") if not p.stem.endswith("_task")}
    found |= {f"kb/{n}": (KB / "few_shot" / f"model_new_ex_{n}.py").read_text() for n in KB_EXAMPLES}
    found |= {f"kb/{n}": (KB / "test_kernels" / f"{n}.py").read_text() for n in KB_ADVERSARIAL}
    found |= {f"judge/{p.stem}": p.read_text() for p in JUDGE.glob("*.py") if not p.stem.endswith("_task")}
    return found


@pytest.fixture(scope="module")
def prov_cache(device_arch: str) -> Path:
    """Every candidate built once; the cache persists between pytest invocations on this machine."""
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    root = Path(os.environ.get("KEVIN_GPU_TEST_CACHE") or Path(tempfile.gettempdir()) / "kevin-gpu-provenance-cache")
    cache = BuildCache(root, arch=device_arch)
    names, codes = zip(*sorted(all_candidates().items()))
    started = time.monotonic()
    outcomes = compile_many(list(codes), cache)
    log_record({"event": "precompile-provenance", "seconds": round(time.monotonic() - started, 2),
                "builds": {n: [(r.seconds, r.cache_hit, r.path) for r in o.results] for n, o in zip(names, outcomes)}})
    # KernelBench's adversarial answers may fail to build (cublas_v2.h is absent from some CUDA
    # installs): that rejects them too, and their test accepts it
    failed = {n: o.message[:2000] for n, o in zip(names, outcomes) if not o.ok and not n.startswith("kb/")
              or not o.ok and n.startswith("kb/") and n.split("/")[1] not in KB_ADVERSARIAL}
    assert not failed, failed
    return root


def run(pool: Any, cache: Path, task: str, candidate: str, label: str, policy: str = "strict",
        **overrides: Any) -> tuple[Verdict, WorkerResult]:
    """One job in a fresh worker (it measures the baseline too: eager timing and the reference's
    launch count); the verdict, logged to KEVIN_GPU_LOG with its kernel table."""
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.protocol import WorkerJob

    settings = EvalSettings(**(FAST | {"policy": policy} | overrides))
    job = WorkerJob(task, candidate, Path("unset"), settings, cache_dir=cache)
    result = pool.run(job)
    verdict = result.verdict
    log_record({"event": "verdict", "label": label, "policy": policy, "seconds": round(result.seconds, 2),
                "stage": verdict.stage.value, "ok": verdict.ok, "message": verdict.message[:3000],
                "kernels": verdict.details.provenance.kernels, "own_share": verdict.details.provenance.own_share,
                "error_vs_fp64": verdict.details.correctness.error_vs_fp64,
                "reference_error_vs_fp64": verdict.details.correctness.reference_error_vs_fp64,
                "max_abs_error": verdict.details.correctness.max_abs_error, "stderr_tail": result.stderr_tail[-1500:]})
    return verdict, result


def kernels_of(verdict: Verdict) -> list[dict[str, Any]]:
    """The verdict's kernel table (empty when provenance recorded none)."""
    return verdict.details.provenance.kernels or []


def prov_task(name: str) -> str:
    return (PROV / f"{name}_task.py").read_text()


def prov_candidate(name: str) -> str:
    return (PROV / f"{name}.py").read_text()


def describe(verdict: Any, result: Any) -> str:
    return f"{verdict.stage.value} ok={verdict.ok}: {verdict.message[:1500]}\n{result.stderr_tail[-1500:]}"


# ---------------------------------------------------------------- too lax: rejected by provenance


@pytest.mark.parametrize("family", LAX)
def test_lax_family_is_rejected_by_provenance(worker_pool, prov_cache, family):
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), prov_candidate(f"lax_{family}"), f"lax/{family}")
    d = verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    assert not verdict.correct and d.provenance.ok is False and d.provenance.policy == "strict"
    assert "kernel provenance check rejected it" in verdict.message
    foreign = [k for k in kernels_of(verdict) if k["origin"] != "own" and k["role"] == "compute"]
    assert foreign, d.provenance.kernels
    assert any(k["origin"] in ("library", "torch", "generated") for k in foreign), d.provenance.kernels
    assert any(k["origin"] == "own" for k in kernels_of(verdict)), d.provenance.kernels  # its token kernel ran
    assert d.provenance.own_share is not None and d.provenance.own_share < 0.5
    assert d.timing.kernel is None  # no timing was spent on it


def test_torch_compile_in_init_is_a_provenance_rejection_naming_the_rule(worker_pool, prov_cache):
    """Issue 17: it ended as a LOAD error (the sandbox's bare PermissionError). Under the sandbox
    the compile is stopped before it runs and the message names the generated-code rule; without
    it the profile shows the generated or cuBLAS kernels. A provenance rejection either way."""
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), prov_candidate("lax_compile_in_init"),
                          "lax/compile_in_init")
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    assert "kernel provenance check rejected" in verdict.message and "torch.compile" in verdict.message
    assert "policy strict" in verdict.message and verdict.details.provenance.ok is False
    assert "PermissionError" not in verdict.message.splitlines()[0]


@pytest.mark.parametrize("policy", ["strict", "partial"])
def test_a_kernel_only_in_a_string_is_rejected_not_unchecked(worker_pool, prov_cache, policy):
    """Issue 17 (fail closed): nothing in the extension can be listed as the candidate's own."""
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), (JUDGE / "kernel_in_string.py").read_text(),
                          f"judge/kernel_in_string/{policy}", policy=policy)
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    assert "no CUDA kernel (__global__ function) could be listed" in verdict.message
    assert not any(r.startswith("provenance not checked") for r in verdict.details.trust.reasons)


def test_work_handed_to_a_helper_thread_is_attributed(worker_pool, prov_cache):
    """Issue 19: launches from every thread of the process count, not only the forward's own."""
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), (JUDGE / "thread_offload.py").read_text(),
                          "judge/thread_offload")
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    kernels = kernels_of(verdict)
    foreign = [k for k in kernels if k["origin"] != "own" and k["role"] == "compute"]
    assert foreign and any(k["origin"] == "own" for k in kernels), kernels


def test_an_answer_that_stops_working_after_the_checked_calls_fails_on_a_timed_call(worker_pool, prov_cache):
    """Issue 19: outputs of timed calls (and of the profiled one) are sampled and checked; every
    call after the seventh is wrong here, so any sample catches it."""
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), (JUDGE / "counts_calls.py").read_text(),
                          "judge/counts_calls")
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), describe(verdict, result)
    assert "timed call" in verdict.message and not verdict.correct


def test_an_answer_that_rewrites_the_workers_reference_fails_in_the_judge(worker_pool, prov_cache):
    """Issue 19: what the candidate's code does to the reference inside the worker (here: makes the
    reference agree with its half product) does not reach the judge process's reference."""
    verdict, result = run(worker_pool, prov_cache, prov_task("mm"), (JUDGE / "rewrites_reference.py").read_text(),
                          "judge/rewrites_reference")
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), describe(verdict, result)
    assert "judged outside your process" in verdict.message and "elements differ" in verdict.message
    assert verdict.details.environment.stage_seconds.get("judge") is not None


def test_honest_answers_are_confirmed_by_the_judge_with_every_checked_call(worker_pool, prov_cache):
    """Issue 19, the control: an honest answer's checked calls all reach the judge and pass there
    (two runs of each correctness trial and at least one sampled timed call)."""
    verdict, result = run(worker_pool, prov_cache, prov_task("add_scale"), prov_candidate("style_two_extensions"),
                          "judge/honest_control")
    assert verdict.ok and verdict.stage == Stage.TIMING, describe(verdict, result)
    # FAST's 3 correctness trials: 6 runs, and at least one sampled timed call
    assert (verdict.details.correctness.judged_calls or 0) >= 7, verdict.details.correctness


# ---------------------------------------------------------------- own kernels: accepted by both policies


@pytest.mark.parametrize("name", sorted(STYLES))
def test_style_own_kernels_pass_strict_and_partial_would_accept(worker_pool, prov_cache, name):
    verdict, result = run(worker_pool, prov_cache, prov_task(STYLES[name]), prov_candidate(name), f"style/{name}")
    d = verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    assert d.provenance.ok and d.provenance.partial_would_accept is True, d.provenance.reasons
    assert (d.provenance.own_share or 0) > 0.5 and kernels_of(verdict)[0]["origin"] == "own", d.provenance.kernels
    assert d.provenance.reference_launches is not None and d.provenance.reference_launches >= 1  # from the baseline job
    assert not any(r.startswith("provenance not checked") for r in d.trust.reasons), d.trust.reasons
    assert "GPU time of one forward call" in verdict.message and "Own kernels:" in verdict.message


@pytest.mark.parametrize("name", sorted(STYLES))
def test_style_own_kernels_pass_partial(worker_pool, prov_cache, name):
    verdict, result = run(worker_pool, prov_cache, prov_task(STYLES[name]), prov_candidate(name),
                          f"style-partial/{name}", policy="partial")
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    assert verdict.details.provenance.policy == "partial" and verdict.details.provenance.ok


@pytest.mark.parametrize("policy", ["strict", "partial"])
@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_look_alikes_pass_both_policies(worker_pool, prov_cache, name, policy):
    """Issue 19: what an honest answer may do that a cheat also does (atomics into an output torch
    zeroed; weights laid out again once in ``__init__``; a speed near the memory bandwidth, with
    512 MiB outputs the witness keeps as seeded samples; its kernels launched as a CUDA graph; an
    fp16 tensor-core GEMM summing K in its own order) is not rejected, the judge outside the
    process confirms its checked calls, and nothing flags it as untrusted."""
    verdict, result = run(worker_pool, prov_cache, prov_task(HONEST[name]), prov_candidate(name),
                          f"honest/{name}/{policy}", policy=policy)
    timing = verdict.details.timing
    log_record({"event": "honest", "label": name, "policy": policy, "sol_fraction": timing.sol_fraction,
                "speedup_vs_eager": timing.speedup_vs_eager})
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    assert verdict.details.provenance.ok, verdict.details.provenance.reasons
    assert (verdict.details.correctness.judged_calls or 0) >= 7, verdict.details.correctness  # 3 trials x 2 + 1
    assert verdict.trust_flags == [], verdict.trust_flags


def test_style_two_extensions_count_both_as_own(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("add_scale"), prov_candidate("style_two_extensions"),
                          "style/two-extensions-own")
    own = {k["name"] for k in kernels_of(verdict) if k["origin"] == "own"}
    assert any("add_kernel" in n for n in own) and any("halve_in_place_kernel" in n for n in own), \
        describe(verdict, result)


# ---------------------------------------------------------------- the partial policy


def test_partial_accepts_a_cudnn_convolution_with_an_own_fused_epilogue(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("conv_bias_relu"),
                          prov_candidate("partial_cudnn_epilogue"), "partial/cudnn-epilogue", policy="partial")
    d = verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    origins = {k["origin"] for k in kernels_of(verdict)}
    assert "library" in origins and "own" in origins
    assert d.provenance.reference_launches is not None


def test_strict_rejects_the_same_and_says_partial_would_accept(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("conv_bias_relu"),
                          prov_candidate("partial_cudnn_epilogue"), "partial/cudnn-epilogue-strict")
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    p = verdict.details.provenance
    assert p.partial_would_accept is True and "partial would accept" in (p.summary or "")
    assert "cuDNN" in verdict.message


@pytest.mark.parametrize("name, why", [("partial_token_fallback", "not fewer than"),
                                       ("partial_compile_fallback", "generated code")])
def test_partial_rejects_fallbacks(worker_pool, prov_cache, name, why):
    verdict, result = run(worker_pool, prov_cache, prov_task("conv_bias_relu"), prov_candidate(name),
                          f"partial/{name}", policy="partial")
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    assert why in verdict.message and not verdict.correct


# ---------------------------------------------------------------- correctness against float64


def test_fp64_matmul_k4096_in_another_order_passes(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("matmul_k4096"), prov_candidate("matmul_other_order"),
                          "fp64/other-order", correctness_trials=5)
    d = verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    c = d.correctness
    assert c.error_vs_fp64 is not None and c.reference_error_vs_fp64 is not None and c.reference_error_vs_fp64 > 0
    assert c.rms_error_vs_fp64 is not None and c.reference_rms_error_vs_fp64 is not None
    assert c.rms_error_vs_fp64 <= 10 * c.reference_rms_error_vs_fp64


def test_fp64_the_same_matmul_in_tf32_fails(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("matmul_k4096"), prov_candidate("matmul_tf32_inputs"),
                          "fp64/tf32", correctness_trials=5)
    d = verdict.details
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), describe(verdict, result)
    assert "against a float64 run of the reference" in verdict.message
    assert d.correctness.error_vs_fp64 is not None and d.correctness.reference_error_vs_fp64 is not None
    assert d.correctness.error_vs_fp64 > 10 * d.correctness.reference_error_vs_fp64


def test_a_diagonal_only_covariance_fails_on_the_trials_exercised_inputs(worker_pool, prov_cache):
    """Covariance of features far from zero (the reference's own E[x x^T] - mean mean^T): on plain
    ``get_inputs()`` alone (one trial, the control) an answer that keeps only the diagonal is within
    the float64 gate; the later trials' correlated or re-centred inputs (worker/exercise.py) reject
    it, in the worker and in the judge alike. An honest two-pass kernel passes every trial."""
    task = prov_task("cov_far_from_zero")
    control, result = run(worker_pool, prov_cache, task, prov_candidate("cov_diagonal_only"),
                          "exercise/diagonal-plain-only", correctness_trials=1)
    assert (control.stage, control.ok) == (Stage.TIMING, True), describe(control, result)
    verdict, result = run(worker_pool, prov_cache, task, prov_candidate("cov_diagonal_only"),
                          "exercise/diagonal", correctness_trials=5)
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), describe(verdict, result)
    assert "that trial's inputs: get_inputs()" in verdict.message and "trial 1 of 5" not in verdict.message
    honest, result = run(worker_pool, prov_cache, task, prov_candidate("cov_centred"), "exercise/centred",
                         correctness_trials=5)
    assert (honest.stage, honest.ok) == (Stage.TIMING, True), describe(honest, result)
    sets = honest.details.correctness.input_sets or []
    assert len(sets) == 5 and not any("skipped" in s for s in sets), sets
    assert (honest.details.correctness.judged_calls or 0) >= 11  # 5 trials x 2 + a timed call


def test_product_reduction_that_underflows_is_not_called_constant(worker_pool, prov_cache):
    verdict, result = run(worker_pool, prov_cache, prov_task("prod_underflow"), prov_candidate("prod_flush_to_zero"),
                          "fp64/underflow", correctness_trials=5)
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    assert "constant" not in verdict.message


# ---------------------------------------------------------------- KernelBench's own examples and adversaries


@pytest.mark.parametrize("name", KB_EXAMPLES)
def test_kernelbench_example_pairs_pass(worker_pool, prov_cache, name):
    policy = "partial" if name == "mnist2" else "strict"
    task = (KB / "few_shot" / f"model_ex_{name}.py").read_text()
    answer = (KB / "few_shot" / f"model_new_ex_{name}.py").read_text()
    verdict, result = run(worker_pool, prov_cache, task, answer, f"kb/{name}", policy=policy)
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), describe(verdict, result)
    assert verdict.details.provenance.ok and verdict.details.provenance.policy == policy


def test_kernelbench_mnist2_is_rejected_by_strict_with_partial_would_accept(worker_pool, prov_cache):
    task = (KB / "few_shot" / "model_ex_mnist2.py").read_text()
    answer = (KB / "few_shot" / "model_new_ex_mnist2.py").read_text()
    verdict, result = run(worker_pool, prov_cache, task, answer, "kb/mnist2-strict")
    assert (verdict.stage, verdict.ok) == (Stage.PROVENANCE, False), describe(verdict, result)
    assert verdict.details.provenance.partial_would_accept is True


@pytest.mark.parametrize("name", KB_ADVERSARIAL)
def test_kernelbench_adversarial_kernels_are_rejected_at_run_time(worker_pool, prov_cache, name):
    """Sent straight to the worker, past the static checks (which reject all three already). The
    cuBLAS-on-a-side-stream one fails to load where cublas_v2.h is missing; else provenance
    rejects it (no kernel of its own can be listed: fail closed, issue 17); the other two fail
    correctness (poisoned memory, inputs)."""
    task = (KB / "test_kernels" / "level1_1_square_matrix_multiplication_task.py").read_text()
    answer = (KB / "test_kernels" / f"{name}.py").read_text()
    for policy in ("strict", "partial"):
        verdict, result = run(worker_pool, prov_cache, task, answer, f"kb-adversarial/{name}/{policy}", policy=policy)
        assert not verdict.correct and not verdict.counts_as_best, describe(verdict, result)
        assert verdict.stage in (Stage.LOAD, Stage.CORRECTNESS, Stage.PROVENANCE), describe(verdict, result)
        if name != "non_default_stream_kernel":
            assert verdict.stage is Stage.CORRECTNESS, describe(verdict, result)
        elif verdict.stage is Stage.PROVENANCE:
            assert "could be listed" in verdict.message, describe(verdict, result)


# ---------------------------------------------------------------- in this process


def test_profiling_patches_nothing_and_records_every_launch():
    """The worker's warm-up works here, and profiling (many sessions in one process, each padded)
    leaves every watched function and numerics setting as it was."""
    import torch

    from kevin_agent.evaluate.provenance.profile import profile_forward
    from kevin_agent.evaluate.worker import guards
    from kevin_agent.evaluate.worker.provenance import profiler_handles, warm_profiler

    device = torch.device("cuda", torch.cuda.current_device())
    captured = guards.capture_references()  # settles torch._dynamo's wrap of manual_seed first (issue 17)
    assert warm_profiler(captured, device) is None
    captured = guards.with_module_state(captured)  # the warm-up's outcome, as the worker takes it
    x = torch.randn(1024, 1024, device=device)
    for _ in range(5):
        acts = profile_forward(lambda t: torch.relu(t @ t) + 1, (x,), device, profiler_handles(captured))
        assert sum(a.calls for a in acts if a.kind == "kernel") >= 3, acts
    assert guards.find_patched(captured) == []
