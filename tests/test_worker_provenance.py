"""The worker's provenance stage on CPU: the profiler is replaced by recorded (hand-made) traces, so
what is tested is the stage's logic: own kernels from the recorded builds, rejection before timing
with the static hints, the reference's launch count, "unavailable" as suspicious not rejected, a
candidate that raises while profiled; plus the verdict data, its text and the guards it relies on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.eval_modes import POLICIES, Policy
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.build.cache import BuildResult, _read_entry, rehome
from kevin_agent.evaluate.provenance.trace import ProfileTrace
from kevin_agent.evaluate.worker import guards
from kevin_agent.evaluate.worker import provenance as W
from kevin_agent.verdict_records import CorrectnessRecord, ProvenanceRecord
from kevin_agent.verdict_text import render_verdict

HANDMADE = Path(__file__).parent / "fixtures" / "provenance" / "handmade"


def scenario(name: str) -> dict[str, Any]:
    return json.loads((HANDMADE / f"{name}.json").read_text())


def build_result(kernels: list[str], path: str = "/cache/ext/abc/split/kevin_abc.so") -> BuildResult:
    return BuildResult(ok=True, seconds=1.0, cache_hit=True, log_path=None, errors=None, path="split",
                       module_path=path, kernels={"path": path, "kernels": kernels, "from_stubs": len(kernels)})


@dataclass
class FakeContext:
    """What check_provenance reads from the worker's Context."""

    settings: EvalSettings
    candidate_path: Path
    details: VerdictDetails = field(default_factory=VerdictDetails)
    device: str = "cpu"
    captured: Any = None
    provenance: Any = None
    patched_text: str | None = None

    def seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def patched(self) -> str | None:
        return self.patched_text

    def fail(self, stage: Stage, message: str, error: str | None = None) -> Verdict:
        self.details.error = error or message
        return Verdict(stage, False, message, self.details)


class Task:
    @staticmethod
    def get_inputs():
        return [torch.randn(8)]


@pytest.fixture
def profiled(monkeypatch):
    """Replace the profiler: ``profiled[label]`` is what profiling the candidate/reference returns."""
    traces: dict[str, Any] = {}
    calls: list[str] = []

    def fake_profile(fn, inputs, ctx, label):
        calls.append(label)
        result = traces[label]
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(W, "_profile", fake_profile)
    monkeypatch.setitem(W._UNAVAILABLE, "reason", None)
    traces["calls"] = calls
    return traces


def run(ctx: FakeContext, name: str, reference_kernels: int | None, hints=lambda: []) -> Verdict | None:
    data = scenario(name)
    given = W.ProvenanceInputs(Task(), object(), object(), reference_kernels,
                               [build_result(list(data["own_kernels"]))], hints)
    return W.check_provenance(ctx, given)


def load(profiled: dict[str, Any], name: str) -> dict[str, Any]:
    data = scenario(name)
    profiled["candidate"] = ProfileTrace.from_dict(data["candidate"]).activities
    profiled["reference"] = ProfileTrace.from_dict(data["reference"]).activities
    return data


def make_ctx(tmp_path: Path, policy: Policy = "strict") -> FakeContext:
    return FakeContext(EvalSettings(policy=policy), tmp_path / "candidate.py")


def test_accepted_candidate_keeps_its_result_for_the_feedback(profiled, tmp_path):
    load(profiled, "own_add_zeros_fill")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "own_add_zeros_fill", 2) is None
    d = ctx.details
    assert ctx.provenance is not None and ctx.provenance.ok
    assert (
        d.provenance.ok
        and d.provenance.policy == "strict"
        and d.provenance.own_share is not None
        and 0.5 < d.provenance.own_share < 1.0
    )
    assert d.provenance.kernels and {"name", "origin", "calls", "ms", "share"} <= set(d.provenance.kernels[0])
    assert (d.provenance.summary or "").startswith("provenance strict: accepted")
    assert profiled["calls"] == ["candidate"]  # the baseline's launch count is reused


def test_strict_rejection_names_foreign_kernels_partial_and_the_source_hints(profiled, tmp_path):
    load(profiled, "conv_cudnn_own_epilogue")
    ctx = make_ctx(tmp_path)
    launches = ProfileTrace.from_dict(scenario("conv_cudnn_own_epilogue")["reference"]).launches
    verdict = run(ctx, "conv_cudnn_own_epilogue", launches, hints=lambda: [f"line {i}: calls F.conv2d [torch-compute]"
                                                                    for i in range(6)])
    assert verdict is not None and verdict.stage is Stage.PROVENANCE and not verdict.ok and not verdict.correct
    assert "cuDNN" in verdict.message and "%" in verdict.message
    assert "Where your code likely does that work:\nline 0: calls F.conv2d" in verdict.message
    assert "and 2 more" in verdict.message
    p = ctx.details.provenance
    assert p.partial_would_accept is True and "partial would accept" in (p.summary or "")
    assert ctx.details.error and ctx.details.error in verdict.message  # not printed twice by render_verdict
    assert ctx.provenance is None


def test_reference_is_profiled_when_the_baseline_has_no_launch_count(profiled, tmp_path):
    load(profiled, "token_own_torch_fallback")
    ctx = make_ctx(tmp_path, "partial")
    verdict = run(ctx, "token_own_torch_fallback", None)
    assert profiled["calls"] == ["candidate", "reference"]
    assert verdict is not None and "not fewer than" in verdict.message
    reference = ProfileTrace.from_dict(scenario("token_own_torch_fallback")["reference"])
    assert ctx.details.provenance.reference_launches == reference.launches


def test_strict_profiles_the_reference_only_to_say_what_partial_would_do(profiled, tmp_path):
    load(profiled, "token_own_torch_fallback")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "token_own_torch_fallback", None) is not None
    assert profiled["calls"] == ["candidate", "reference"] and ctx.details.provenance.partial_would_accept is False
    profiled["calls"].clear()
    load(profiled, "own_only_add")
    assert run(make_ctx(tmp_path), "own_only_add", None) is None
    assert profiled["calls"] == ["candidate"]  # accepted: no reference profile needed


def test_a_failed_profile_of_the_candidates_call_rejects_it(profiled, tmp_path):
    """Fail closed: the worker's profiler worked at start-up, so a profile of the candidate's call
    that fails is on the candidate's side (it could break CUPTI on purpose): rejected, not flagged."""
    profiled["candidate"] = RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
    for policy in POLICIES:
        ctx = make_ctx(tmp_path, policy)
        verdict = run(ctx, "own_only_add", 1)
        assert verdict is not None and verdict.stage is Stage.PROVENANCE and not verdict.correct
        assert "could not be checked" in verdict.message and "CUPTI_ERROR_NOT_INITIALIZED" in verdict.message
        assert f"policy {policy}" in verdict.message and ctx.details.provenance.ok is False
        assert ctx.provenance is None and not ctx.details.trust.suspicious


def test_unavailable_profiler_at_worker_start_flags_suspicious(profiled, monkeypatch, tmp_path):
    """The profiler failed before any candidate code ran (no CUPTI on this host): the environment's
    fault, flagged "not checked" so the answer never counts as best."""
    monkeypatch.setitem(W._UNAVAILABLE, "reason", "the profiler recorded no GPU work")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "own_only_add", 1) is None and ctx.details.trust.suspicious
    assert ctx.details.trust.reasons[0].startswith("provenance not checked")
    assert profiled["calls"] == []


@pytest.mark.parametrize("policy", ["strict", "partial"])
@pytest.mark.parametrize("extensions, why", [
    ([], "no load_inline extension was recorded"),
    ([build_result([])], "no CUDA kernel (__global__ function) could be listed"),
])
def test_no_listed_own_kernel_is_rejected_under_both_policies(profiled, tmp_path, policy, extensions, why):
    """Fail closed (issue 17): KernelBench's non_default_stream_kernel (cuBLAS on a side stream, no
    kernel of its own) and a CUDA kernel kept only in a string (nothing compiled) were judged
    correct with "provenance not checked". Recorded: an own-looking kernel name ran, but nothing
    in the extension lists it, so it is not own; the trace is still profiled for the table."""
    load(profiled, "own_only_add")
    ctx = make_ctx(tmp_path, policy)
    verdict = W.check_provenance(ctx, W.ProvenanceInputs(Task(), object(), object(), 1, extensions, lambda: []))
    assert verdict is not None and verdict.stage is Stage.PROVENANCE and not verdict.ok and not verdict.correct
    assert why in verdict.message and "kernel provenance check rejected it" in verdict.message
    d = ctx.details
    assert d.provenance.ok is False and d.provenance.reasons[0].startswith(why.split(" (")[0])
    assert not any(r.startswith("provenance not checked") for r in d.trust.reasons)
    assert d.provenance.kernels and all(k["origin"] != "own" for k in d.provenance.kernels)
    assert profiled["calls"] == ["candidate"]


def test_no_listed_own_kernel_and_a_failed_profile_give_both_reasons(profiled, tmp_path):
    profiled["candidate"] = RuntimeError("boom")
    ctx = make_ctx(tmp_path)
    verdict = W.check_provenance(ctx, W.ProvenanceInputs(Task(), object(), object(), 1, [build_result([])],
                                                         lambda: []))
    assert verdict is not None and not verdict.correct
    assert "could be listed" in verdict.message and "boom" in verdict.message


def test_candidate_that_raises_while_profiled_fails_like_a_run_time_error(profiled, tmp_path):
    try:
        raise ValueError("only under the profiler")
    except ValueError as inner:
        outer = W.CandidateRaised("x")
        outer.__cause__ = inner
    profiled["candidate"] = outer
    verdict = run(make_ctx(tmp_path), "own_only_add", 1)
    assert verdict is not None and verdict.stage is Stage.PROVENANCE
    assert "raised an error at run time" in verdict.message and "only under the profiler" in verdict.message


def test_patching_during_the_profile_is_caught(profiled, tmp_path):
    load(profiled, "own_only_add")
    ctx = make_ctx(tmp_path)
    ctx.patched_text = "Your code replaced functions ... (torch.profiler.profile)"
    verdict = run(ctx, "own_only_add", 1)
    assert verdict is not None and "torch.profiler.profile" in verdict.message


def test_own_kernels_union_dedupes_and_lists_old_entries(monkeypatch):
    from kevin_agent.evaluate.provenance.symbols import ExtensionKernels

    listed = []

    def list_kernels(path):
        listed.append(path)
        return ExtensionKernels(path, ("_Z1kPf",))

    monkeypatch.setattr(W, "list_kernels", list_kernels)
    old = build_result([], "/old.so")
    old.kernels = None
    own, extensions = W.own_kernels([build_result(["_Z1aPf"], "/a.so"), build_result(["_Z1aPf"], "/a.so"),
                                     build_result(["c_kernel"], "/b.so"), old])
    assert listed == ["/old.so"] and len(extensions) == 3
    assert set(own.names) == {"_Z1aPf", "c_kernel", "_Z1kPf"}


# ---------------------------------------------------------------- data, text, cache entries


def test_stage_order_and_correctness_of_provenance_verdicts():
    stages = list(Stage)
    assert stages.index(Stage.CORRECTNESS) < stages.index(Stage.PROVENANCE) < stages.index(Stage.TIMING)
    assert not Verdict(Stage.PROVENANCE, False, "foreign").correct
    assert Verdict(Stage.PROVENANCE, True, "untimed").correct
    assert Verdict(Stage.CORRECTNESS, True, "old untimed verdicts").correct
    assert Verdict(Stage.TIMING, True, "timed").correct and not Verdict(Stage.CORRECTNESS, False, "x").correct
    assert Verdict(Stage.PROVENANCE, False, "foreign").speedup == 0.0


def test_verdict_details_round_trip_the_new_fields():
    details = VerdictDetails(
        correctness=CorrectnessRecord(error_vs_fp64=1e-3, reference_error_vs_fp64=5e-4),
        provenance=ProvenanceRecord(
            kernels=[{"name": "k", "origin": "own", "calls": 1, "ms": 0.1, "share": 1.0}],
            own_share=1.0,
            policy="partial",
            partial_would_accept=None,
            reasons=["r"],
        ),
    )
    again = Verdict.from_dict(json.loads(json.dumps(Verdict(Stage.TIMING, True, "m", details).to_dict())))
    assert again.details == details
    assert VerdictDetails.from_dict({"max_abs_error": 1.0}).provenance.kernels is None  # runs stored before provenance


def test_render_verdict_shows_the_kernel_table_fp64_errors_and_the_provenance_line():
    details = VerdictDetails(
        correctness=CorrectnessRecord(
            max_abs_error=2e-3, max_rel_error=1e-2, atol=1e-4, rtol=1e-4, error_vs_fp64=2.2e-3,
            reference_error_vs_fp64=1.1e-3, rms_error_vs_fp64=3e-4, reference_rms_error_vs_fp64=2e-4,
            fp64_accepted=True),
        provenance=ProvenanceRecord(
            own_share=0.75, policy="strict", summary="provenance strict: accepted; own kernels 75.0%",
            kernels=[{"name": "void relu_kernel<float>(float const*, float*, long)", "origin": "own", "calls": 1,
                      "ms": 0.03, "share": 0.75, "role": "compute"},
                     {"name": "Memset (Device)", "origin": "torch", "calls": 1, "ms": 0.01, "share": 0.25,
                      "role": "fill"}]))
    text = render_verdict(Verdict(Stage.TIMING, True, "ok", details))
    assert ("against float64: max abs 0.0022 (eager's own 0.0011), RMS 0.0003 (eager's own 0.0002); passed by the "
            "float64 rule") in text
    assert "provenance strict: accepted; own kernels 75.0%" in text
    assert "relu_kernel<float>" in text and "(float const*" not in text and "torch/fill" in text


def test_build_entries_without_kernels_still_load(tmp_path):
    entry = tmp_path / "ext" / "k"
    entry.mkdir(parents=True)
    raw = {"ok": True, "seconds": 1.0, "cache_hit": False, "log_path": None, "errors": None, "path": "split",
           "module_path": "/x.so", "a_field_from_the_future": 1}
    (entry / "result.json").write_text(json.dumps(raw))
    result = _read_entry(entry, 0.0)
    assert result is not None and result.kernels is None and result.cache_hit


def test_relocated_build_result_moves_the_listing_path(tmp_path):
    tmp, final = tmp_path / "tmp", tmp_path / "final"
    result = build_result(["_Z1kPf"], str(tmp / "split" / "m.so"))
    moved = rehome(result, str(tmp), final)
    assert moved.module_path == str(final / "split" / "m.so")
    assert moved.kernels is not None and moved.kernels["path"] == moved.module_path


def test_global_numerics_settings_are_watched():
    captured = guards.capture_references(own_modules=())
    assert "torch.backends.cuda.matmul.allow_tf32" in captured.settings
    assert guards.find_patched(captured) == []
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = not before
        assert "torch.backends.cuda.matmul.allow_tf32" in guards.find_patched(captured)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert guards.find_patched(captured) == []


def test_profiler_entry_points_are_watched():
    import torch.profiler

    captured = guards.capture_references(own_modules=())
    handles = W.profiler_handles(captured)
    assert handles.profile is torch.profiler.profile
    original = torch.profiler.profile.__enter__
    try:
        torch.profiler.profile.__enter__ = lambda self: self  # type: ignore[method-assign]  # the patch under test
        assert "torch.profiler.profile.__enter__" in guards.find_patched(captured)
    finally:
        torch.profiler.profile.__enter__ = original  # type: ignore[method-assign]  # restoring the real one


# ---------------------------------------------------------------- generated code stopped before it ran


def _denied_backend(gm, example_inputs):
    raise PermissionError(13, "Permission denied", "/cache/inductor/xy/kernel.py")


def _compile_error() -> BaseException:
    """A real torch.compile whose compiler is refused a file (as the sandbox refuses inductor's
    cache writes and ptxas): the error comes back through dynamo's frames, wrapped."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.relu(x) * 2, backend=_denied_backend)
    try:
        compiled(torch.randn(4))
    except Exception as exc:
        return exc
    raise AssertionError("the compile did not fail")


def test_an_error_out_of_torch_compile_is_recognised_as_generated_code():
    from kevin_agent.evaluate.worker.loader import raised_by_generated_code

    assert raised_by_generated_code(_compile_error())
    try:
        open("/nonexistent-dir-kevin/x", "w")
    except OSError as plain:
        assert not raised_by_generated_code(plain)
    try:  # torch.manual_seed is wrapped by dynamo's disable decorator: not generated code
        torch.manual_seed("not a seed")  # a wrong argument: dynamo's wrapper raises
    except Exception as seeded:
        assert not raised_by_generated_code(seeded)


@pytest.mark.parametrize("policy", ["strict", "partial"])
def test_torch_compile_stopped_by_the_sandbox_gets_the_provenance_rule(tmp_path, policy):
    """Issue 17: compile_in_init and partial_compile_fallback ended as LOAD errors (a bare
    PermissionError from the sandbox); now a provenance rejection naming the rule."""
    from kevin_agent.evaluate.worker import stages

    ctx = make_ctx(tmp_path, policy)
    verdict = stages._failure(cast(Any, ctx), Stage.LOAD, _compile_error())
    assert verdict.stage is Stage.PROVENANCE and not verdict.ok and not verdict.correct
    assert "generated code" in verdict.message and f"policy {policy}" in verdict.message
    assert "torch.compile" in verdict.message and "Permission denied" in verdict.message
    assert ctx.details.provenance.ok is False and ctx.details.provenance.policy == policy
    plain = stages._failure(cast(Any, make_ctx(tmp_path)), Stage.LOAD, ValueError("bad shape"))
    assert plain.stage is Stage.LOAD and "raised an error at run time" in plain.message


def test_profiling_imports_do_not_look_like_a_patched_manual_seed():
    """Issue 17: the profiler's first session imports torch._inductor (``hasattr(torch,
    "_inductor")``), which imports torch._dynamo, which wraps torch.manual_seed: references
    captured before that saw it "patched". In a fresh process, where dynamo is not imported yet."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from kevin_agent.evaluate.worker import guards\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "captured = guards.capture_references(own_modules=())\n"
        "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n"
        "    torch.ones(2) + 1\n"
        "assert 'torch._inductor' in sys.modules\n"
        "print('PATCHED', guards.find_patched(captured))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert "PATCHED []" in done.stdout, done.stdout + done.stderr[-2000:]


# ---------------------------------------------------------------- the profiled call looks like a timed one (issue 19)


def test_the_profiled_call_is_a_rotation_call_at_a_random_position(monkeypatch, tmp_path):
    from kevin_agent.evaluate.worker.correctness import keep_output, refill_inputs
    from kevin_agent.evaluate.worker.timing import Rotation

    data = scenario("own_only_add")
    activities = ProfileTrace.from_dict(data["candidate"]).activities
    profiled: list[int] = []

    def fake_profile_forward(fn, args, device, handles, keep=None, padding=0):
        profiled.append(len(calls))
        fn(*args)
        return activities

    monkeypatch.setattr(W, "profile_forward", fake_profile_forward)
    monkeypatch.setattr(W, "profiler_handles", lambda captured: None)
    monkeypatch.setitem(W._UNAVAILABLE, "reason", None)
    pool = [(torch.full((8,), float(i)),) for i in range(3)]
    calls: list[tuple[int, float]] = []

    def candidate(x):
        calls.append((x.data_ptr(), float(x[0])))
        return x * 2

    positions = set()
    for _ in range(12):
        calls.clear()
        profiled.clear()
        rotation = Rotation(pool, (pool[0][0].clone(),), refill_inputs, keep_output, lambda: 0.0, limit=10)
        given = W.ProvenanceInputs(Task(), object(), candidate, 1, [build_result(list(data["own_kernels"]))],
                                   lambda: [], rotation)
        assert W.check_provenance(make_ctx(tmp_path), given) is None
        assert len({ptr for ptr, _ in calls}) == 1 and calls[0][0] == rotation.staging[0].data_ptr()
        assert [v for _, v in calls] == [float(i % 3) for i in range(len(calls))]  # the sets rotate
        assert 1 <= len(calls) <= 1 + W.PROFILE_LEAD_IN_MAX and profiled == [len(calls) - 1]
        assert len(rotation.kept) == len(calls)  # the profiled call's output is sampled like the others
        positions.add(len(calls))
    assert len(positions) > 1  # 12 draws of 4 equally likely positions: all equal with probability 4^-11
