"""The worker's candidate stages wired end to end on the CPU (issue 19): the real load,
correctness, timing with the rotation and the sampled check of timed outputs, with a CPU stand-in
for CUDA events and memory poisoning, and the profile replaced by an acceptance (the GPU part;
tests/gpu covers it). What is checked: an honest answer is timed and correct; an answer that
stops working after the checked calls fails on a timed call; an answer returning a tensor
subclass fails correctness."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kevin_agent.data import Stage, TimingStats, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import Baseline, WorkerJob
from kevin_agent.evaluate.worker import guards, stages
from kevin_agent.evaluate.worker.context import Context, load_reference
from kevin_agent.evaluate.worker.timing import wall_clock

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(16, 8), torch.randn(8, 4)]

def get_init_inputs():
    return []
"""

HONEST = """
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
"""

COUNTS = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.last = 0, None

    def forward(self, a, b):
        self.calls += 1
        if self.calls <= 5 or self.last is None:  # the load call and 2 correctness trials
            self.last = a @ b
        return self.last
"""

SUBCLASS = """
import torch
import torch.nn as nn

class Out(torch.Tensor):
    pass

class ModelNew(nn.Module):
    def forward(self, a, b):
        return (a @ b).as_subclass(Out)
"""


class CpuContext(Context):
    def poison(self) -> int:
        return 0


@pytest.fixture
def accepted(monkeypatch):
    monkeypatch.setattr(stages, "check_provenance", lambda ctx, given: None)


def judge(source: str, tmp_path: Path, witness: Path | None = None) -> Any:
    settings = EvalSettings(sandbox="off", correctness_trials=2, timing_trials=20, warmup_trials=2,
                            with_torch_compile=False)
    captured = guards.capture_references(own_modules=())
    ctx = CpuContext(captured, wall_clock(), "cpu", settings, VerdictDetails(), tmp_path / "candidate.py",
                     flush=lambda: None)
    if witness is not None:
        from kevin_agent.evaluate.judge_wire import WitnessWriter

        ctx.witness = WitnessWriter(witness)
    task, reference, init_inputs = load_reference(TASK, tmp_path, ctx)
    job = WorkerJob(TASK, source, tmp_path / "result.json", settings, cache_dir=tmp_path / "cache")
    stats = TimingStats(1.0, 1.0, 1.0, 1.0, 0.0, 20, 1.0, 1.0)
    return stages._evaluate_candidate(job, tmp_path / "cache", ctx, (task, reference, init_inputs),
                                      Baseline(eager=stats), None)


def test_an_honest_answer_is_timed(accepted, tmp_path):
    verdict = judge(HONEST, tmp_path)
    assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), verdict.message
    seconds = verdict.details.environment.stage_seconds  # where a worker's GPU stage goes (issue 20's breakdown)
    assert [k for k in seconds if "_" not in k] == ["load", "correctness", "provenance", "timing"]
    assert {k for k in seconds if k.startswith("correctness_")} == {
        f"correctness_{part}" for part in ("inputs", "poison", "candidate", "copy", "reference", "compare")}
    assert min(seconds.values()) >= 0
    assert "timed_below_profile" not in [f.name for f in verdict.details.trust.flags]  # no profile: no check


def test_a_median_below_the_profilers_record_earns_nothing(monkeypatch, tmp_path):
    """The profiled call used far more GPU time than the timer measured: the timing was rewritten."""
    def seen_for_a_second(ctx, given):
        ctx.provenance = SimpleNamespace(total_ms=1000.0)

    monkeypatch.setattr(stages, "check_provenance", seen_for_a_second)
    monkeypatch.setattr(stages, "_with_profile", lambda message, ctx: message)
    verdict = judge(HONEST, tmp_path)
    assert verdict.stage is Stage.TIMING and not verdict.correct, verdict.message
    assert "timed_below_profile" in [f.name for f in verdict.details.trust.flags]


def test_an_answer_that_stops_working_after_the_checked_calls_fails(accepted, tmp_path):
    verdict = judge(COUNTS, tmp_path)
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False), verdict.message
    assert "timed call" in verdict.message
    assert "timing" in verdict.details.environment.stage_seconds  # a failure inside a stage is timed too


def test_a_subclass_output_fails_correctness(accepted, tmp_path):
    verdict = judge(SUBCLASS, tmp_path)
    assert (verdict.stage, verdict.ok) == (Stage.CORRECTNESS, False) and "tensor subclass" in verdict.message


def test_the_real_stages_witness_and_the_judge_confirms_them(accepted, tmp_path):
    """Issue 19 end to end on the CPU: the worker's real stages write the witness (2 trials x 2 runs,
    the sampled timed calls), the judge's own code (``evaluate.judge.judge``, as its process runs
    it) confirms every call, and the parent's rule counts the verdict; the counting answer, whose
    timed calls are stale, fails there too."""
    import json

    import torch

    from kevin_agent.evaluate.judge import judge as judge_process
    from kevin_agent.evaluate.judgement import judged_verdict

    verdict = judge(HONEST, tmp_path / "honest", witness=tmp_path / "honest" / "witness")
    line = json.dumps({"task_source": TASK, "seed": verdict_seed(), "witness": str(tmp_path / "honest" / "witness")})
    report = judge_process(line, torch.device("cpu"))
    assert report.error is None and len(report.checked) >= 5 and not any(c.problem for c in report.checked)
    counted = judged_verdict(verdict, report, verdict_seed(), 2)
    assert counted.passed and counted.details.correctness.judged_calls == len(report.checked)

    stale = judge(COUNTS, tmp_path / "counts", witness=tmp_path / "counts" / "witness")
    assert not stale.ok  # the worker's own check of timed calls finds it too
    line = json.dumps({"task_source": TASK, "seed": verdict_seed(), "witness": str(tmp_path / "counts" / "witness")})
    report = judge_process(line, torch.device("cpu"))
    assert any(c.problem and "timed call" in c.label for c in report.checked), report.checked


def verdict_seed() -> int:
    return EvalSettings().seed
