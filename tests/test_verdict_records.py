"""The verdict's per-stage records: the nested JSON form, the older flat form still read, the
typed build merge, and the trust flag helper the worker's guards watch."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kevin_agent import data
from kevin_agent.data import Candidate, Stage, Task, Verdict, VerdictDetails, flag_untrusted
from kevin_agent.evaluate.verdicts import merge_build_details
from kevin_agent.evaluate.worker.guards import OWN_MODULES
from kevin_agent.store import RunStore
from kevin_agent.verdict_records import (
    BuildRecord,
    CorrectnessRecord,
    EnvironmentRecord,
    ProvenanceRecord,
    TimingRecord,
    TimingStats,
    TrustFlag,
    TrustRecord,
)

ROOT = Path(__file__).resolve().parents[1]
STATS: dict = {"median_ms": 0.5, "mean_ms": 0.51, "min_ms": 0.49, "max_ms": 0.6, "iqr_ms": 0.02, "trials": 50,
         "ci_low_ms": 0.495, "ci_high_ms": 0.505}
KERNEL_ROW = {"name": "k", "origin": "own", "calls": 1, "ms": 0.1, "share": 1.0, "role": "compute", "family": ""}

# A verdict's details as stored before the records: one flat object, every field set.
OLD_FLAT: dict = {
    "trials_passed": 5, "trials_total": 5, "max_abs_error": 1e-6, "max_rel_error": 2e-6, "atol": 1e-4,
    "rtol": 1e-4, "error_vs_fp64": 3e-6, "reference_error_vs_fp64": 4e-6, "rms_error_vs_fp64": 5e-7,
    "reference_rms_error_vs_fp64": 6e-7, "fp64_accepted": False,
    "kernels": [KERNEL_ROW], "own_share": 1.0, "foreign_share": 0.0, "provenance_policy": "strict",
    "provenance_ok": True, "partial_would_accept": None, "provenance_reasons": ["r1"], "reference_launches": 3,
    "provenance_summary": "provenance strict: accepted",
    "eager": STATS, "compiled": {**STATS, "median_ms": 0.4}, "kernel": {**STATS, "median_ms": 0.2},
    "torch_compile_seconds": 12.5, "speedup_vs_eager": 2.5, "speedup_vs_compile": 2.0,
    "flops": 1e9, "bytes_moved": 4e6, "sol_ms": 0.05, "sol_fraction": 0.25,
    "suspicious": True, "suspicious_reasons": ["work escapes the timed stream"],
    "trust_flags": [{"name": "escaped_stream", "reason": "work escapes the timed stream"}],
    "build_seconds": 9.5, "cache_hit": True, "build_log_path": "/c/build.log", "build_path": "split",
    "compiler_errors": "none really", "static_rule": "torch-compute", "error": "boom",
    "gpu_name": "NVIDIA H200", "torch_version": "2.9.0", "cuda_version": "13.0", "gpu_uuid": "GPU-1",
    "lane": "cuda:0", "baseline_cached": True, "baseline_seconds": 4.25, "sandbox": "landlock abi 7 + seccomp",
    "stage_seconds": {"load": 0.5, "timing": 1.25}, "replayed": True, "measured_in": "run-7",
    "some_key_from_the_future": 1,
}

EXPECTED = VerdictDetails(
    build=BuildRecord(seconds=9.5, cache_hit=True, log_path="/c/build.log", path="split",
                      compiler_errors="none really"),
    correctness=CorrectnessRecord(trials_passed=5, trials_total=5, max_abs_error=1e-6, max_rel_error=2e-6,
                                  atol=1e-4, rtol=1e-4, error_vs_fp64=3e-6, reference_error_vs_fp64=4e-6,
                                  rms_error_vs_fp64=5e-7, reference_rms_error_vs_fp64=6e-7, fp64_accepted=False),
    provenance=ProvenanceRecord(kernels=[KERNEL_ROW], own_share=1.0, foreign_share=0.0, policy="strict", ok=True,
                                partial_would_accept=None, reasons=["r1"], reference_launches=3,
                                summary="provenance strict: accepted"),
    timing=TimingRecord(eager=TimingStats(**STATS), compiled=TimingStats(**{**STATS, "median_ms": 0.4}),
                        kernel=TimingStats(**{**STATS, "median_ms": 0.2}), torch_compile_seconds=12.5,
                        speedup_vs_eager=2.5, speedup_vs_compile=2.0, flops=1e9, bytes_moved=4e6, sol_ms=0.05,
                        sol_fraction=0.25, baseline_cached=True, baseline_seconds=4.25),
    trust=TrustRecord(suspicious=True, reasons=["work escapes the timed stream"],
                      flags=[TrustFlag("escaped_stream", "work escapes the timed stream")]),
    environment=EnvironmentRecord(gpu_name="NVIDIA H200", torch_version="2.9.0", cuda_version="13.0",
                                  gpu_uuid="GPU-1", lane="cuda:0", sandbox="landlock abi 7 + seccomp",
                                  stage_seconds={"load": 0.5, "timing": 1.25}, replayed=True, measured_in="run-7"),
    static_rule="torch-compute",
    error="boom",
)


def test_an_old_flat_dict_with_every_field_loads_into_the_records():
    assert VerdictDetails.from_dict(OLD_FLAT) == EXPECTED


def test_to_dict_writes_one_object_per_record():
    raw = EXPECTED.to_dict()
    assert list(raw) == ["build", "correctness", "provenance", "timing", "trust", "environment", "static_rule",
                         "error"]
    assert raw["build"] == {"seconds": 9.5, "cache_hit": True, "log_path": "/c/build.log", "path": "split",
                            "compiler_errors": "none really"}
    assert raw["provenance"]["policy"] == "strict" and raw["provenance"]["ok"] is True
    assert raw["timing"]["kernel"]["median_ms"] == 0.2 and raw["timing"]["speedup_vs_eager"] == 2.5
    assert raw["trust"] == {"suspicious": True, "reasons": ["work escapes the timed stream"],
                            "flags": [{"name": "escaped_stream", "reason": "work escapes the timed stream"}]}
    assert raw["environment"]["stage_seconds"] == {"load": 0.5, "timing": 1.25}
    assert (raw["static_rule"], raw["error"]) == ("torch-compute", "boom")
    assert "speedup_vs_eager" not in raw and "build_seconds" not in raw  # no flat copies


def test_the_nested_form_reads_back_through_json():
    raw = json.loads(json.dumps(Verdict(Stage.TIMING, True, "fast", EXPECTED).to_dict()))
    assert Verdict.from_dict(raw).details == EXPECTED


def test_unknown_keys_are_ignored_in_both_forms():
    nested = EXPECTED.to_dict()
    nested["later_record"] = {"x": 1}
    nested["timing"]["later_field"] = 3
    nested["environment"]["node"] = "n1"
    assert VerdictDetails.from_dict(nested) == EXPECTED
    assert VerdictDetails.from_dict({"nothing_we_know": 1}) == VerdictDetails()


def test_a_partly_stored_flat_dict_leaves_the_rest_empty():
    details = VerdictDetails.from_dict({"speedup_vs_eager": 1.5, "provenance_ok": False, "cache_hit": False})
    assert details.timing.speedup_vs_eager == 1.5 and details.timing.kernel is None
    assert details.provenance.ok is False and details.provenance.reasons == []
    assert details.build.cache_hit is False and details.build.seconds is None
    assert details.trust == TrustRecord() and details.environment == EnvironmentRecord()


def test_recorded_flat_verdicts_on_disk_still_load():
    """The H200 recording of 2026-12-03, in the flat form it was written in (kept as a fixture;
    examples/verdicts.json is re-recorded, nested)."""
    raw = json.loads((ROOT / "tests" / "fixtures" / "verdicts_flat_2026-12-03.json").read_text())
    for stored in raw["by_marker"].values():
        assert "build" not in stored["details"]  # the file is the old flat form, left as recorded
        verdict = Verdict.from_dict(stored)
        assert verdict.details.timing.speedup_vs_eager == stored["details"].get("speedup_vs_eager")
        assert verdict.details.environment.gpu_name == stored["details"]["gpu_name"]
        assert verdict.details.build.seconds == stored["details"]["build_seconds"]
        assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


def test_merge_build_details_fills_only_what_the_worker_left_empty():
    worker = Verdict(Stage.TIMING, True, "ok", VerdictDetails(build=BuildRecord(seconds=1.0, path="whole")))
    parent = VerdictDetails(build=BuildRecord(seconds=7.0, cache_hit=True, log_path="/b.log", path="split",
                                              compiler_errors="warning"))
    merged = merge_build_details(worker, parent)
    assert merged.details.build == BuildRecord(seconds=1.0, cache_hit=True, log_path="/b.log", path="whole")


def test_flag_untrusted_is_a_watched_module_function_filling_the_trust_record():
    assert data.flag_untrusted is flag_untrusted and "kevin_agent.data" in OWN_MODULES
    assert "kevin_agent.verdict_records" in OWN_MODULES
    details = VerdictDetails()
    flag_untrusted(details, "implausible_speedup", "over 10x")
    assert details.trust == TrustRecord(True, ["over 10x"], [TrustFlag("implausible_speedup", "over 10x")])
    assert not Verdict(Stage.TIMING, True, "ok", details).trusted


def test_a_run_stored_with_flat_details_still_loads(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r1", Task(source="class Model: pass\n", class_name="Model"), {})
    store.add_candidate("r1", Candidate(0, 0, id="t0.0", code="x"), [])
    store.add_verdict("r1", "t0.0", Verdict(Stage.TIMING, True, "fast", EXPECTED))
    old = {"stage": "timing", "ok": True, "message": "fast", "details": OLD_FLAT}
    with sqlite3.connect(tmp_path / "runs.sqlite") as conn:  # as an older kevin-agent wrote it
        conn.execute("UPDATE verdicts SET verdict_json = ? WHERE candidate_id = 't0.0'", (json.dumps(old),))
    store.close()
    verdict = RunStore(tmp_path / "runs.sqlite").load_run("r1").candidates[0][1]
    assert verdict is not None and verdict.details == EXPECTED


def test_the_recorded_example_verdicts_load_nested():
    raw = json.loads((ROOT / "examples" / "verdicts.json").read_text())
    for stored in raw["by_marker"].values():
        verdict = Verdict.from_dict(stored)
        assert verdict.details.environment.gpu_name == stored["details"]["environment"]["gpu_name"]
        assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
