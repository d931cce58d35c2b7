"""The worker's provenance stage on CPU: the profiler is replaced by recorded (hand-made) traces, so
what is tested is the stage's logic: own kernels from the recorded builds, rejection before timing
with the static hints, the reference's launch count, "unavailable" as suspicious not rejected, a
candidate that raises while profiled; plus the verdict data, its text and the guards it relies on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.build.cache import BuildResult, _read_entry, rehome
from kevin_agent.evaluate.provenance.trace import ProfileTrace
from kevin_agent.evaluate.worker import guards
from kevin_agent.evaluate.worker import provenance as W
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


def make_ctx(tmp_path: Path, policy: str = "strict") -> FakeContext:
    return FakeContext(EvalSettings(policy=policy), tmp_path / "candidate.py")


def test_accepted_candidate_keeps_its_result_for_the_feedback(profiled, tmp_path):
    load(profiled, "own_add_zeros_fill")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "own_add_zeros_fill", 2) is None
    d = ctx.details
    assert ctx.provenance is not None and ctx.provenance.ok
    assert d.provenance_ok and d.provenance_policy == "strict" and d.own_share is not None and 0.5 < d.own_share < 1.0
    assert d.kernels and {"name", "origin", "calls", "ms", "share"} <= set(d.kernels[0])
    assert (d.provenance_summary or "").startswith("provenance strict: accepted")
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
    assert ctx.details.partial_would_accept is True and "partial would accept" in (ctx.details.provenance_summary or "")
    assert ctx.details.error and ctx.details.error in verdict.message  # not printed twice by render_verdict
    assert ctx.provenance is None


def test_reference_is_profiled_when_the_baseline_has_no_launch_count(profiled, tmp_path):
    load(profiled, "token_own_torch_fallback")
    ctx = make_ctx(tmp_path, "partial")
    verdict = run(ctx, "token_own_torch_fallback", None)
    assert profiled["calls"] == ["candidate", "reference"]
    assert verdict is not None and "not fewer than" in verdict.message
    reference = ProfileTrace.from_dict(scenario("token_own_torch_fallback")["reference"])
    assert ctx.details.reference_launches == reference.launches


def test_strict_profiles_the_reference_only_to_say_what_partial_would_do(profiled, tmp_path):
    load(profiled, "token_own_torch_fallback")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "token_own_torch_fallback", None) is not None
    assert profiled["calls"] == ["candidate", "reference"] and ctx.details.partial_would_accept is False
    profiled["calls"].clear()
    load(profiled, "own_only_add")
    assert run(make_ctx(tmp_path), "own_only_add", None) is None
    assert profiled["calls"] == ["candidate"]  # accepted: no reference profile needed


def test_profiler_failure_flags_suspicious_instead_of_rejecting(profiled, tmp_path):
    profiled["candidate"] = RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "own_only_add", 1) is None
    assert ctx.details.suspicious and "provenance not checked: profiling failed" in ctx.details.suspicious_reasons[0]
    assert ctx.provenance is None


def test_unavailable_profiler_and_missing_listing_flag_suspicious(profiled, monkeypatch, tmp_path):
    monkeypatch.setitem(W._UNAVAILABLE, "reason", "the profiler recorded no GPU work")
    ctx = make_ctx(tmp_path)
    assert run(ctx, "own_only_add", 1) is None and ctx.details.suspicious
    monkeypatch.setitem(W._UNAVAILABLE, "reason", None)
    ctx = make_ctx(tmp_path)
    given = W.ProvenanceInputs(Task(), object(), object(), 1, [], lambda: [])
    assert W.check_provenance(ctx, given) is None
    assert "no load_inline extension was recorded" in ctx.details.suspicious_reasons[0]
    assert profiled["calls"] == []


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
    details = VerdictDetails(kernels=[{"name": "k", "origin": "own", "calls": 1, "ms": 0.1, "share": 1.0}],
                             own_share=1.0, provenance_policy="partial", partial_would_accept=None,
                             error_vs_fp64=1e-3, reference_error_vs_fp64=5e-4, provenance_reasons=["r"])
    again = Verdict.from_dict(json.loads(json.dumps(Verdict(Stage.TIMING, True, "m", details).to_dict())))
    assert again.details == details
    assert VerdictDetails.from_dict({"max_abs_error": 1.0}).kernels is None  # runs stored before provenance


def test_render_verdict_shows_the_kernel_table_fp64_errors_and_the_provenance_line():
    details = VerdictDetails(
        max_abs_error=2e-3, max_rel_error=1e-2, atol=1e-4, rtol=1e-4, error_vs_fp64=2.2e-3,
        reference_error_vs_fp64=1.1e-3, rms_error_vs_fp64=3e-4, reference_rms_error_vs_fp64=2e-4, fp64_accepted=True,
        own_share=0.75, provenance_policy="strict", provenance_summary="provenance strict: accepted; own kernels 75.0%",
        kernels=[{"name": "void relu_kernel<float>(float const*, float*, long)", "origin": "own", "calls": 1,
                  "ms": 0.03, "share": 0.75, "role": "compute"},
                 {"name": "Memset (Device)", "origin": "torch", "calls": 1, "ms": 0.01, "share": 0.25, "role": "fill"}])
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
        torch.profiler.profile.__enter__ = original  # type: ignore[method-assign]  # undo it
