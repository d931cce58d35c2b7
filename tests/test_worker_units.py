"""CPU tests of the GPU worker's pure parts: tolerances, mismatch text, correctness trials, timing
statistics, speed-of-light arithmetic, patch detection, input snapshots, the job protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kevin_agent.data import Stage, TimingStats, Verdict, VerdictDetails
from kevin_agent.evaluate.protocol import BadJob, WorkerJob, WorkerReply
from kevin_agent.evaluate.worker import guards
from kevin_agent.evaluate.worker.correctness import (
    CorrectnessHarness,
    compare_output,
    constant_problem,
    run_correctness,
    tolerance_for,
    trial_seed,
)
from kevin_agent.evaluate.worker.loader import clean_error_line, describe_exception, load_module_from_file
from kevin_agent.evaluate.worker.main import write_reply
from kevin_agent.evaluate.worker.speed_of_light import (
    PeakRates,
    count_flops,
    dominant_dtype,
    load_peaks,
    min_bytes,
    peaks_cache_path,
    save_peaks,
    sol_ms,
    suspicion_reasons,
    tensor_bytes,
)
from kevin_agent.evaluate.worker.timing import escape_reason, flush_buffer_bytes, spread_of_medians, stats_from_samples
from kevin_agent.verdict_records import TimingRecord

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- tolerances and comparison


@pytest.mark.parametrize(
    "dtype, expected",
    [(torch.float32, 1e-4), (torch.float64, 1e-4), (torch.float16, 1e-2), (torch.bfloat16, 1e-2),
     (torch.int64, 0.0), (torch.bool, 0.0), ("float16", 1e-2)],
)
def test_tolerance_by_dtype(dtype, expected):
    assert tolerance_for(dtype) == (expected, expected)


def test_matching_output_has_no_problem_and_reports_errors():
    expected = torch.linspace(-1, 1, 1000)
    got = expected + 5e-5  # inside atol=1e-4
    check = compare_output(0, expected, got)
    assert check.problem is None
    assert check.max_abs_error == pytest.approx(5e-5, rel=1e-2)
    assert (check.atol, check.rtol) == (1e-4, 1e-4)


def test_mismatch_text_counts_elements_and_errors():
    expected = torch.ones(4, 8)
    got = expected.clone()
    got[0, :3] = 1.5
    check = compare_output(1, expected, got)
    assert check.mismatched == 3
    assert "output 1: 3 of 32 elements differ beyond atol=0.0001, rtol=0.0001" in (check.problem or "")
    assert "max abs error 0.5" in (check.problem or "") and "max rel error 0.5" in (check.problem or "")
    assert "expected float32 [4, 8], got float32 [4, 8]" in (check.problem or "")


def test_shape_and_dtype_mismatch_named():
    check = compare_output(0, torch.zeros(4, 8), torch.zeros(8, 4))
    assert check.problem == "output 0 has float32 [8, 4], expected float32 [4, 8]"
    check = compare_output(0, torch.zeros(4), torch.zeros(4, dtype=torch.float16))
    assert "float16 [4], expected float32 [4]" in (check.problem or "")


def test_nan_where_reference_finite_fails_but_matching_nan_passes():
    expected = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare_output(0, expected, expected.clone()).problem is None
    got = expected.clone()
    got[0] = float("nan")
    check = compare_output(0, expected, got)
    assert "1 NaN/Inf values where the reference is finite" in (check.problem or "")
    got = expected.clone()
    got[2] = float("-inf")
    assert compare_output(0, expected, got).mismatched == 1


def test_half_precision_uses_loose_tolerance():
    expected = torch.ones(16, dtype=torch.float16)
    assert compare_output(0, expected, expected + 0.005).problem is None
    assert compare_output(0, expected, expected + 0.05).problem is not None


def test_constant_output_fails_where_reference_varies():
    reference = torch.randn(64) * 1e-6  # all within atol of zero
    zeros = torch.zeros(64)
    assert compare_output(0, reference, zeros).problem is None  # tolerance alone would pass it
    assert "constant (every element is 0)" in (constant_problem(0, reference, zeros) or "")
    assert constant_problem(0, torch.full((8,), 3.0), torch.full((8,), 3.0)) is None


# ---------------------------------------------------------------- correctness trials (CPU)


class Scale(torch.nn.Module):
    def forward(self, x, factor):
        return x * factor


def harness(candidate, reference=None, get_inputs=None):
    seeds = []

    def seed_all(seed: int) -> None:
        seeds.append(seed)
        torch.manual_seed(seed)

    h = CorrectnessHarness(
        reference=reference or Scale(),
        candidate=candidate,
        get_inputs=get_inputs or (lambda: [torch.randn(32, 16), 2]),
        device="cpu",
        seed_all=seed_all,
        synchronize=lambda: None,
        poison=lambda: 0,
    )
    return h, seeds


def test_correct_candidate_passes_every_trial_on_fresh_seeds():
    h, seeds = harness(Scale())
    result = run_correctness(h, trials=5, base_seed=42)
    assert result.ok and result.trials_passed == 5 and result.trials_total == 5
    assert seeds == [trial_seed(42, t) for t in range(5)] and len(set(seeds)) == 5 and 42 not in seeds


def test_the_trials_say_where_their_time_went_when_asked():
    """Issue 20: the correctness stage's seconds by part, on a clock that ticks one per reading."""
    ticks = iter(range(10_000))
    h, _ = harness(Scale())
    h.parts, h.clock = {}, lambda: float(next(ticks))
    h.witness = lambda seed, label, leaves: None
    assert run_correctness(h, trials=2, base_seed=0).ok
    assert set(h.parts) == {"inputs", "poison", "candidate", "copy", "reference", "witness", "compare"}
    assert h.parts["poison"] == 4 and h.parts["reference"] == 2  # two per trial, one per trial; a tick each
    plain, _ = harness(Scale())
    assert run_correctness(plain, trials=1, base_seed=0).ok and plain.parts is None


class ZeroesInput(torch.nn.Module):
    def forward(self, x, factor):
        out = x * factor
        x.zero_()
        return out


def test_input_mutation_fails_with_reason():
    result = run_correctness(harness(ZeroesInput())[0], trials=5, base_seed=0)
    assert not result.ok and result.trials_passed == 0
    assert "modified its inputs (input 0) on trial 1 of 5, first candidate run" in result.message


class InPlaceReference(torch.nn.Module):
    def forward(self, x, factor):
        return x.mul_(factor)


def test_mutation_allowed_where_the_reference_mutates_too():
    result = run_correctness(harness(InPlaceReference(), reference=InPlaceReference())[0], 3, 0)
    assert result.ok, result.message


class RemembersFirstOutput(torch.nn.Module):
    """Returns its first result forever: caught by fresh inputs on the next trial."""

    def __init__(self):
        super().__init__()
        self.saved = None

    def forward(self, x, factor):
        if self.saved is None:
            self.saved = x * factor
        return self.saved


def test_stale_output_fails_on_a_later_trial():
    result = run_correctness(harness(RemembersFirstOutput())[0], trials=5, base_seed=0)
    assert not result.ok and result.trials_passed == 1
    assert "512 of 512 elements differ" in result.message
    assert "(trial 2 of 5, first candidate run); that trial's inputs: get_inputs() mixed" in result.message


class OnlyFirstCallRight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, factor):
        self.calls += 1
        return x * factor if self.calls % 2 == 1 else x * factor + 1


def test_second_candidate_run_is_compared_too():
    result = run_correctness(harness(OnlyFirstCallRight())[0], trials=2, base_seed=0)
    assert not result.ok and "second candidate run" in result.message


def test_patched_function_fails_correctness():
    h, _ = harness(Scale())
    h.check_patched = lambda: "patched torch.cuda.synchronize"
    result = run_correctness(h, trials=3, base_seed=0)
    assert not result.ok and result.patched and result.message == "patched torch.cuda.synchronize"


def test_wrong_output_count_and_tuple_outputs():
    class Pair(torch.nn.Module):
        def forward(self, x, factor):
            return x, x * factor

    result = run_correctness(harness(Scale(), reference=Pair())[0], trials=1, base_seed=0)
    assert "forward returned 1 outputs, expected 2" in result.message
    assert run_correctness(harness(Pair(), reference=Pair())[0], trials=2, base_seed=0).ok


# ---------------------------------------------------------------- timing statistics


def test_stats_from_samples():
    stats = stats_from_samples([4.0, 1.0, 3.0, 2.0, 5.0])
    assert stats == TimingStats(median_ms=3.0, mean_ms=3.0, min_ms=1.0, max_ms=5.0, iqr_ms=2.0, trials=5,
                                ci_low_ms=1.0, ci_high_ms=5.0)  # 5 samples: the interval is the whole range
    assert stats.spread == pytest.approx(2.0 / 3.0)
    assert stats_from_samples([0.5]).iqr_ms == 0.0
    with pytest.raises(ValueError):
        stats_from_samples([])


def test_median_interval_narrows_with_trials_and_adaptive_timing_stops_when_stable():
    import random

    from kevin_agent.evaluate.worker.timing import Timer, is_stable, median_interval

    rng = random.Random(3)
    few = sorted(rng.gauss(1.0, 0.05) for _ in range(20))
    many = sorted(rng.gauss(1.0, 0.05) for _ in range(400))
    assert (median_interval(many)[1] - median_interval(many)[0]) < (median_interval(few)[1] - median_interval(few)[0])
    assert not is_stable([1.0] * 19) and is_stable([1.0] * 20)  # never fewer than 20 timed runs

    class Steady(Timer):  # a kernel whose times are already tight: the floor of trials suffices
        def __init__(self, noise: float) -> None:
            self.noise, self.calls = noise, 0

        def time(self, fn, args, trials, warmup):
            self.calls += trials
            return [1.0 + rng.uniform(-self.noise, self.noise) for _ in range(trials)]

    steady = Steady(0.001)
    assert len(steady.time_adaptive(lambda: None, (), cap=100, warmup=0)) == 20
    noisy = Steady(0.5)  # never within +-1% of the median: the cap ends it
    assert len(noisy.time_adaptive(lambda: None, (), cap=100, warmup=0)) == 100


def test_spread_of_medians():
    assert spread_of_medians([1.0, 1.01, 0.99, 1.0, 1.0]) == pytest.approx(0.02)


def test_flush_buffer_exceeds_twice_l2():
    assert flush_buffer_bytes(50 * 2**20) > 100 * 2**20
    assert flush_buffer_bytes(None) == 256 * 2**20 and flush_buffer_bytes(0) == 256 * 2**20


def test_escape_detection():
    # side stream: events see almost nothing, the synced run sees the real kernel
    assert "escapes the timed stream" in (escape_reason(0.004, 0.310, 0.010) or "")
    assert escape_reason(0.300, 0.312, 0.010) is None  # honest kernel
    assert escape_reason(0.002, 0.012, 0.008) is None  # tiny kernel: gap below noise


# ---------------------------------------------------------------- speed of light


def test_sol_arithmetic_takes_the_slower_bound():
    # 1 GFLOP at 100 TFLOP/s = 0.01 ms; 1 GB at 1 TB/s = 1 ms -> memory bound
    assert sol_ms(1e9, 1e9, 100e12, 1e12) == pytest.approx(1.0)
    assert sol_ms(1e12, 1e6, 100e12, 1e12) == pytest.approx(10.0)


def test_suspicion_reasons():
    assert suspicion_reasons(0.5, 2.0) == []
    reasons = suspicion_reasons(1.3, 12.0, "work escapes the timed stream", kernel_ms=0.1, sol_bound_ms=0.13)
    assert len(reasons) == 3
    assert "speed of light (1.30x" in reasons[0] and "12.0x faster than PyTorch eager" in reasons[1]


def test_bytes_and_flops_of_a_linear_layer():
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    flops, out = count_flops(layer, [x])
    assert flops == 2 * 8 * 64 * 32
    expected = (8 * 64 + 64 * 32 + 32 + 8 * 32) * 4
    assert min_bytes([x], layer, out) == expected
    assert tensor_bytes([x, x]) == x.numel() * 4  # the same storage counts once
    assert dominant_dtype([x.half(), torch.randn(2)]) == "float16"
    assert dominant_dtype([torch.ones(3, dtype=torch.int64)]) == "float32"


def test_peaks_cache_roundtrip(tmp_path):
    path = peaks_cache_path(tmp_path, "NVIDIA H200", "2.11.0+cu130", "13.0")
    assert path.parent == tmp_path / "speed-of-light" and " " not in path.name
    assert load_peaks(path) is None
    peaks = PeakRates("NVIDIA H200", "2.11.0", "13.0", 4.2e12, {"float32": 4e14, "bfloat16": 7.5e14})
    save_peaks(path, peaks)
    loaded = load_peaks(path)
    assert loaded == peaks and loaded.flops_for("bfloat16") == 7.5e14 and loaded.flops_for("int8") == 4e14
    path.write_text("{broken")
    assert load_peaks(path) is None


# ---------------------------------------------------------------- guards


def test_patch_detection_names_what_was_replaced(monkeypatch):
    captured = guards.capture_references()
    assert guards.find_patched(captured) == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001)
    monkeypatch.setattr(torch.Tensor, "clone", lambda self: self)
    assert guards.find_patched(captured) == [
        "time.perf_counter", "torch.Tensor.clone", "torch.cuda.Event.elapsed_time",
    ]
    message = guards.patched_message(guards.find_patched(captured))
    assert "time.perf_counter" in message and "not allowed" in message


def test_patch_detection_sees_own_module_functions(monkeypatch):
    from kevin_agent.evaluate.worker import timing

    captured = guards.capture_references()
    monkeypatch.setattr(timing, "stats_from_samples", lambda samples: None)
    assert guards.find_patched(captured) == ["kevin_agent.evaluate.worker.timing.stats_from_samples"]


def test_no_false_positive_from_torch_machinery():
    import torch._dynamo  # the worker imports it before capturing

    captured = guards.capture_references()
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False):
        torch.nn.Linear(4, 4)(torch.randn(2, 4))
    compiled = torch.compile(lambda a: a * 2 + 1, backend="eager")
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 3.0))
    assert guards.find_patched(captured) == []


def test_snapshots_and_changed_inputs():
    inputs = [torch.tensor([1.0, float("nan")]), 3, {"k": torch.ones(2)}]
    copy = guards.snapshot(inputs)
    assert guards.changed_inputs(inputs, copy) == []  # NaN compared bit-for-bit
    copy[0][0] = 2.0
    copy[2]["k"].zero_()
    assert guards.changed_inputs(inputs, copy) == ["input 0", "input 2['k']"]
    assert guards.changed_inputs([torch.ones(4)], [torch.ones(4).view(2, 2)]) == ["input 0"]
    assert guards.changed_inputs([1, "a"], [1, "b"]) == ["input 1"]


def test_poison_plan_covers_every_free_block():
    segments = [
        {"segment_type": "large", "blocks": [
            {"size": 8 << 20, "state": "active_allocated"}, {"size": 12 << 20, "state": "inactive"}]},
        {"segment_type": "small", "blocks": [
            {"size": 1536 << 10, "state": "inactive"}, {"size": 512, "state": "inactive"}]},
        {"segment_type": "large", "blocks": [{"size": 20 << 20, "state": "inactive"}]},
    ]
    plan = guards.poison_plan(segments)
    assert plan == [20 << 20, 12 << 20, 1 << 20, 512 << 10, 512]
    assert all(size <= 1 << 20 for size in plan[2:])  # small-pool pieces stay in the small pool


# ---------------------------------------------------------------- error text


def test_describe_exception_keeps_candidate_frames(tmp_path):
    source = "def helper(x):\n    return 1 / x\n\n\ndef forward(x):\n    return helper(x)\n"
    path = tmp_path / "candidate.py"
    module = load_module_from_file(source, path, "kevin_test_candidate_frames")
    with pytest.raises(ZeroDivisionError) as info:
        module.forward(0)
    text = describe_exception(info.value, path)
    assert 'File "candidate.py", line 6, in forward' in text
    assert 'File "candidate.py", line 2, in helper\n    return 1 / x' in text
    assert text.strip().endswith("ZeroDivisionError: division by zero")
    assert "test_worker_units" not in text and str(tmp_path) not in text


def test_describe_syntax_error_and_cuda_noise(tmp_path):
    path = tmp_path / "candidate.py"
    with pytest.raises(SyntaxError) as info:
        load_module_from_file("def f(:\n", path, "kevin_test_syntax")
    text = describe_exception(info.value, path)
    assert 'File "candidate.py", line 1' in text and "SyntaxError" in text
    noisy = ("CUDA error: an illegal memory access was encountered\n"
             "CUDA kernel errors might be asynchronously reported at some other API call.\n"
             "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")
    assert clean_error_line(noisy) == "CUDA error: an illegal memory access was encountered"
    assert "CUDA error raised while running your kernels" in describe_exception(RuntimeError(noisy), path)


# ---------------------------------------------------------------- job protocol


def test_read_job_and_settings(tmp_path):
    job_path = tmp_path / "job.json"
    job_path.write_text(json.dumps({
        "task_source": "T", "candidate_source": "C", "result_path": str(tmp_path / "r.json"),
        "cache_dir": str(tmp_path / "cache"),
        "settings": {"timing_trials": 7, "cache_dir": str(tmp_path), "unknown_future_field": 1},
    }))
    job = WorkerJob.read(job_path)
    assert job.settings.timing_trials == 7 and job.settings.cache_dir == tmp_path
    assert job.cache_dir == tmp_path / "cache" and job.result_path == tmp_path / "r.json"
    from kevin_agent.evaluate.api import EvalSettings

    assert EvalSettings.from_dict({}, unknown="ignore").correctness_trials == 5
    assert WorkerJob.read(_written(tmp_path / "again.json", job.to_json())) == job  # round trip
    job_path.write_text(json.dumps({"task_source": "T"}))
    with pytest.raises(BadJob, match="lacks candidate_source, result_path"):
        WorkerJob.read(job_path)
    with pytest.raises(BadJob, match="cannot read job"):
        WorkerJob.read(tmp_path / "missing.json")


def _written(path, text):
    path.write_text(text)
    return path


def test_write_reply_is_atomic_and_complete(tmp_path):
    path = tmp_path / "out" / "result.json"
    verdict = Verdict(Stage.TIMING, True, "fast", VerdictDetails(timing=TimingRecord(speedup_vs_eager=2.0)))
    write_reply(WorkerJob("T", "C", path, reply_token="5f1e"), WorkerReply(verdict=verdict))
    reply = WorkerReply.read(path)
    assert reply and reply.verdict and reply.verdict.details.timing.speedup_vs_eager == 2.0
    assert reply.token == "5f1e"  # the job's token, which the parent checks the reply by
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temp file left


def test_the_job_file_is_gone_once_read_and_its_token_kept(tmp_path):
    """The token must not stay on disk where the candidate's code (same process, same folder)
    could read it and stamp a reply of its own."""
    from kevin_agent.evaluate.worker.main import read_job

    path = _written(tmp_path / "job.json", WorkerJob("T", "C", tmp_path / "r.json", reply_token="9c2a").to_json())
    assert read_job(path).reply_token == "9c2a"
    assert not path.exists()


def test_task_failure_reply_is_structured(tmp_path):
    path = tmp_path / "result.json"
    write_reply(WorkerJob("T", "C", path), WorkerReply(task_failure="NameError: name 'x' is not defined",
                                                       task_failure_detail="tb"))
    reply = WorkerReply.read(path)
    assert reply and reply.verdict is None and (reply.task_failure or "").startswith("NameError")
    path.write_text("{}")  # neither a verdict nor a task failure: unusable, like a crash
    assert WorkerReply.read(path) is None


def test_worker_without_cuda_exits_3_before_ready():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "kevin_agent.evaluate.worker"], input="", capture_output=True, text=True,
        env=env, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 3
    assert "READY" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "kevin-worker: no CUDA device is available to torch"


def test_output_on_another_device_fails():
    check = compare_output(0, torch.zeros(2, device="meta"), torch.zeros(2))
    assert check.problem == "output 0 is on cpu, expected on meta"


# ---------------------------------------------------------------- guards compare code and state (issue 19)


def _judge_helper(x):
    return x + 1


def test_a_function_rewritten_in_place_is_caught():
    """Identity alone misses ``f.__code__ = ...``: the function object stays the same."""
    import types

    module = types.ModuleType("kevin_judge_probe")
    module.__dict__.update(helper=_judge_helper, TOLERANCE=1e-4, RULES={"strict": "own kernels only"})
    sys.modules["kevin_judge_probe"] = module
    try:
        captured = guards.capture_references(paths=(), classes=(), own_modules=("kevin_judge_probe",))
        assert guards.find_patched(captured) == []
        original = _judge_helper.__code__
        _judge_helper.__code__ = (lambda x: x).__code__
        try:
            assert guards.find_patched(captured) == ["kevin_judge_probe.helper"]
        finally:
            _judge_helper.__code__ = original
        _judge_helper.__defaults__ = (1,)
        try:
            assert guards.find_patched(captured) == ["kevin_judge_probe.helper"]
        finally:
            _judge_helper.__defaults__ = None
        module.__dict__["TOLERANCE"] = 1.0
        module.__dict__["RULES"]["strict"] = "anything goes"
        assert guards.find_patched(captured) == ["kevin_judge_probe.RULES", "kevin_judge_probe.TOLERANCE"]
    finally:
        del sys.modules["kevin_judge_probe"]


def test_the_judges_own_constants_and_tables_are_watched():
    from kevin_agent.evaluate.provenance import names, policy
    from kevin_agent.evaluate.worker import correctness

    captured = guards.capture_references(paths=(), classes=())
    assert "kevin_agent.evaluate.worker.correctness.FP64_RMS_MULTIPLIER" in captured.state
    before = correctness.FP64_RMS_MULTIPLIER
    correctness.FP64_RMS_MULTIPLIER = 1e9
    try:
        assert guards.find_patched(captured) == ["kevin_agent.evaluate.worker.correctness.FP64_RMS_MULTIPLIER"]
    finally:
        correctness.FP64_RMS_MULTIPLIER = before
    assert "kevin_agent.evaluate.provenance.names.FAMILIES" in captured.state
    original = names.FAMILIES
    names.FAMILIES = ()  # every library kernel unknown: "other", not cuBLAS
    try:
        assert guards.find_patched(captured) == ["kevin_agent.evaluate.provenance.names.FAMILIES"]
    finally:
        names.FAMILIES = original
    policy.POLICY_RULES["strict"] = "x"
    try:
        assert "kevin_agent.evaluate.provenance.policy.POLICY_RULES" in guards.find_patched(captured)
    finally:
        policy.POLICY_RULES["strict"] = captured.state["kevin_agent.evaluate.provenance.policy.POLICY_RULES"]["strict"]
    assert guards.find_patched(captured) == []


def test_settings_changed_behind_the_judges_back_are_caught(tmp_path):
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.worker.context import Context

    captured = guards.capture_references(paths=(), classes=(), own_modules=())
    ctx = Context(captured, None, "cpu", EvalSettings(policy="strict"),  # type: ignore[arg-type]  # no clock needed
                  VerdictDetails(), tmp_path / "c.py")
    assert ctx.patched() is None
    object.__setattr__(ctx.settings, "policy", "partial")  # found through gc, frozen or not
    assert "evaluation settings" in (ctx.patched() or "")
