"""Issue 19: the judge outside the candidate's process, on the CPU with the real judge process.

A stand-in worker (tests/workers/witness_standin.py) always claims a passing verdict, as candidate
code that tampered with the worker's in-process checks would; only the witness it writes differs.
The real judge (``python -m kevin_agent.evaluate.judge``) then decides: each attack has its
control (the same stand-in, honest), so the judge is shown to be what stops it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.isolation import DEFAULT_JUDGE_COMMAND, WorkerPool
from kevin_agent.evaluate.judge_wire import (
    MAGIC,
    BadWitness,
    SampledLeaf,
    WitnessWriter,
    open_witness,
    read_calls,
    read_witness,
    same_leaves,
    sample_positions,
    write_call,
)
from kevin_agent.evaluate.judgement import CheckedCall, JudgeReport, judged_verdict
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.worker import correctness
from kevin_agent.evaluate.worker.correctness import CorrectnessHarness, make_inputs, run_correctness

STANDIN = Path(__file__).parent / "workers" / "witness_standin.py"
TASK = """
import torch

class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n, n))

    def forward(self, x):
        return x @ self.weight

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [16]
"""


def standin_pool(tmp_path: Path) -> WorkerPool:
    return WorkerPool([sys.executable, str(STANDIN)], scratch_root=tmp_path / "scratch", spares=0,
                      run_timeout_s=120.0, start_timeout_s=120.0, judge_command=DEFAULT_JUDGE_COMMAND,
                      judge_timeout_s=120.0)


def run_standin(tmp_path: Path, mode: str, trials: int = 3) -> Verdict:
    settings = EvalSettings(seed=7, correctness_trials=trials)
    with standin_pool(tmp_path) as pool:
        return pool.run(WorkerJob(TASK, mode, Path("unset"), settings=settings)).verdict


def test_an_honest_witness_is_confirmed_by_the_judge(tmp_path: Path) -> None:
    verdict = run_standin(tmp_path, "honest")
    assert verdict.passed and verdict.stage == Stage.TIMING, verdict.message
    assert verdict.details.correctness.judged_calls == 8  # 3 trials x 2 runs + 2 runs of a timed set
    stages = verdict.details.environment.stage_seconds
    assert stages["judge"] >= stages["judge_compare"] > 0
    assert {"judge_load", "judge_read", "judge_inputs"} <= set(stages)


def test_outputs_the_judge_finds_wrong_fail_though_the_worker_said_correct(tmp_path: Path) -> None:
    verdict = run_standin(tmp_path, "wrong")
    assert not verdict.passed and verdict.stage == Stage.CORRECTNESS
    assert "judged outside your process" in verdict.message and "elements differ" in verdict.message


def test_a_sampled_witness_of_an_honest_answer_is_confirmed(tmp_path: Path) -> None:
    """Outputs too large to write whole (here every call: a whole-call limit of 256 bytes) travel
    as 32 of their 128 elements at positions drawn from a seed; the judge draws the same ones."""
    verdict = run_standin(tmp_path, "sampled")
    assert verdict.passed and verdict.stage == Stage.TIMING, verdict.message
    assert verdict.details.correctness.judged_calls == 8


@pytest.mark.parametrize("mode", ["sampled-wrong", "sampled-slab"])
def test_wrong_values_in_a_sampled_witness_fail_in_the_judge(tmp_path: Path, mode: str) -> None:
    """Every element off, or a run of 16 of 128 elements off (a sample of 32 misses it with
    probability 0.875**32 = 1.4% per call, in all 4 distinct calls 4e-8)."""
    verdict = run_standin(tmp_path, mode)
    assert not verdict.passed and verdict.stage == Stage.CORRECTNESS
    assert "judged outside your process" in verdict.message and "elements differ" in verdict.message


@pytest.mark.parametrize(("mode", "words"), [
    ("partial", "did not receive the outputs of trial 2"),
    ("none", "witness of your outputs is unreadable"),
    ("link", "witness of your outputs is unreadable"),
    ("lie", "claims 4294967296 bytes, more than the witness holds"),
])
def test_a_missing_short_or_forged_witness_earns_nothing(tmp_path: Path, mode: str, words: str) -> None:
    verdict = run_standin(tmp_path, mode)
    assert not verdict.passed and verdict.stage == Stage.CORRECTNESS
    assert words in verdict.message


def test_a_judge_that_cannot_start_fails_closed(tmp_path: Path) -> None:
    with WorkerPool([sys.executable, str(STANDIN)], scratch_root=tmp_path / "s", spares=0,
                    judge_command=[sys.executable, "-c", "import sys; sys.exit(5)"]) as pool:
        verdict = pool.run(WorkerJob(TASK, "honest", Path("unset"), settings=EvalSettings(seed=7))).verdict
    assert not verdict.passed and "could not check your outputs" in verdict.message


def test_the_judge_does_not_import_from_its_working_folder(tmp_path: Path) -> None:
    """Its working folder lies in the job folder, which candidate code may write."""
    folder = tmp_path / "judge"
    folder.mkdir()
    (folder / "kevin_planted.py").write_text("PLANTED = True\n")
    task = TASK + "\nimport kevin_planted\n"
    (tmp_path / "witness").mkdir()
    line = json.dumps({"task_source": task, "seed": 1, "witness": str(tmp_path / "witness")})
    done = subprocess.run(DEFAULT_JUDGE_COMMAND, input=line, capture_output=True, text=True, cwd=folder,
                          timeout=300, check=True)
    report = JudgeReport.parse(done.stdout)
    assert report is not None and report.error and "kevin_planted" in report.error
    control = subprocess.run([sys.executable, "-c", "import kevin_planted"], cwd=folder, capture_output=True)
    assert control.returncode == 0  # without the judge's cleaning, the folder's module is imported


def test_tampering_with_the_in_process_checker_does_not_reach_the_judge(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What a candidate's Python can do inside the worker (loosen a tolerance) passes the worker's
    own correctness run; the judge, another process, still finds the wrong outputs."""
    namespace: dict[str, object] = {}
    exec(compile(TASK, "task.py", "exec"), namespace)
    torch.manual_seed(7)
    reference = namespace["Model"](16)  # type: ignore[operator]
    wrong = lambda x: reference(x) + 0.05  # noqa: E731
    witness = WitnessWriter(tmp_path / "witness")
    harness = CorrectnessHarness(reference=reference, candidate=wrong, get_inputs=namespace["get_inputs"],  # type: ignore[arg-type]
                                 device="cpu", seed_all=torch.manual_seed, synchronize=lambda: None,
                                 poison=lambda: 0, witness=witness.record)
    monkeypatch.setattr(correctness, "tolerance_for", lambda dtype: (1.0, 1.0))  # the candidate's patch
    assert run_correctness(harness, trials=2, base_seed=7).ok  # control: in-process, the patch works
    assert sorted(p.name for p in (tmp_path / "witness").iterdir()) == [f"call-00{i}.bin" for i in range(4)]
    assert (tmp_path / "witness" / "call-001.bin").stat().st_size < 200  # the second run repeats the first
    line = json.dumps({"task_source": TASK, "seed": 7, "witness": str(tmp_path / "witness")})
    done = subprocess.run(DEFAULT_JUDGE_COMMAND, input=line, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, check=True)
    report = JudgeReport.parse(done.stdout)
    assert report is not None and report.error is None and len(report.checked) == 4
    assert all(c.problem and "elements differ" in c.problem for c in report.checked)


def test_inputs_made_from_a_seed_are_the_same_in_another_process() -> None:
    """The judge relies on it: the worker and the judge make each checked call's inputs apart."""
    code = ("import torch; from kevin_agent.evaluate.worker.correctness import make_inputs; torch.manual_seed(11); "
            "print(make_inputs(lambda: [torch.randn(3, 3)], 'cpu')[0].sum().item())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    torch.manual_seed(11)
    here = make_inputs(lambda: [torch.randn(3, 3)], "cpu")[0].sum().item()
    assert float(other.stdout.strip()) == here


# -- the witness format, read as hostile input ---------------------------------------------------------
def written(*calls: tuple[int, str, list]) -> io.BytesIO:
    buffer = io.BytesIO()
    buffer.write(MAGIC)
    for seed, label, leaves in calls:
        write_call(buffer, seed, label, leaves)
    buffer.seek(0)
    return buffer


def read_all(buffer: io.BytesIO, tmp_path: Path) -> list:
    path = tmp_path / "w.bin"
    path.write_bytes(buffer.getvalue())
    with open_witness(path) as handle:
        return list(read_calls(handle))


def test_witness_round_trip_keeps_every_kind_of_output(tmp_path: Path) -> None:
    leaves = [torch.randn(3, 4), torch.arange(5), torch.tensor([True, False]), torch.tensor(2.5, dtype=torch.float64),
              torch.empty(0, 3), torch.randn(2, 2).to(torch.bfloat16), 3, 0.25, None, complex(1, -2)]
    calls = read_all(written((5, "trial 1", leaves), (6, "timed", [torch.ones(2)])), tmp_path)
    assert [(c.seed, c.label) for c in calls] == [(5, "trial 1"), (6, "timed")]
    for got, want in zip(calls[0].leaves, leaves, strict=True):
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want)
        else:
            assert got == want


def header(body: dict | bytes, size: int | None = None) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (len(raw) if size is None else size).to_bytes(4, "big") + raw


@pytest.mark.parametrize(("content", "words"), [
    (b"NOT-A-WITNESS\n", "marker"),
    (MAGIC + header(b"{}", size=0), "header is 0 bytes"),
    (MAGIC + header(b"{}", size=10 * 1024 * 1024), "header is 10485760 bytes"),
    (MAGIC + header(b"not json"), "does not parse"),
    (MAGIC + header({"seed": "7", "label": "x", "leaves": []}), "integer seed"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"dtype": "object", "shape": [1]}]}), "known dtypes"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"dtype": "torch.float32", "shape": [1]}]}), "known dtypes"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"dtype": "float32", "shape": [-1]}]}), "short list"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"dtype": "float32", "shape": [1 << 40]}]}), "more than"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"scalar": [1, 2]}]}), "plain number"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": [{"dtype": "float32", "shape": [1]}] * 300}), "300 outputs"),
    (MAGIC + header({"seed": 7, "label": "x", "leaves": []}) * 65, "more than 64 calls"),
])
def test_a_malformed_witness_is_refused_with_what_is_wrong(tmp_path: Path, content: bytes, words: str) -> None:
    with pytest.raises(BadWitness, match=words):
        read_all(io.BytesIO(content), tmp_path)


def test_a_witness_that_is_a_link_or_a_fifo_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(MAGIC)
    (tmp_path / "link").symlink_to(secret)
    with pytest.raises(OSError):
        open_witness(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadWitness, match="not a regular file"):
        open_witness(tmp_path / "fifo")


# -- the parent's rules ---------------------------------------------------------------------------------
def passed(stage: Stage = Stage.TIMING) -> Verdict:
    return Verdict(stage, True, "Your answer was correct", VerdictDetails())


def calls(seeds: list[int], runs: int = 2) -> JudgeReport:
    return JudgeReport([CheckedCall(s, f"run {r}") for s in seeds for r in range(runs)])


def test_the_judge_must_confirm_two_runs_of_every_trial_and_a_timed_call() -> None:
    # seeds of trials 1..3 with base seed 10 are 11, 12, 13 (fixed numbers, not the module's formula)
    assert judged_verdict(passed(), calls([11, 12, 13, 99]), 10, 3).passed
    assert judged_verdict(passed(Stage.PROVENANCE), calls([11, 12, 13]), 10, 3).passed  # untimed: no timed call
    broke_in_timing = Verdict(Stage.TIMING, False, "raised while timed", VerdictDetails())
    confirmed = judged_verdict(broke_in_timing, calls([11, 12, 13]), 10, 3)
    assert (confirmed.stage, confirmed.ok, confirmed.message) == (Stage.TIMING, False, "raised while timed")
    for report, words in ((calls([11, 12, 99]), "trial 3 (0 of 2 runs)"),
                          (calls([11, 12, 13, 99], runs=1), "trial 1 (1 of 2 runs)"),
                          (calls([11, 12, 13]), "the sampled timed calls"),
                          (None, "it did not report"),
                          (JudgeReport(error="boom"), "(boom)")):
        verdict = judged_verdict(passed(), report, 10, 3)
        assert not verdict.passed and verdict.stage == Stage.CORRECTNESS and words in verdict.message


def test_a_problem_the_judge_found_decides_and_a_failure_stands_as_it_was() -> None:
    report = calls([11, 99])
    report.checked[1].problem = "output 0: 3 of 8 elements differ"
    verdict = judged_verdict(passed(), report, 10, 1)
    assert not verdict.passed and "3 of 8 elements differ (judged outside your process)" in verdict.message
    failed = Verdict(Stage.LOAD, False, "it crashed", VerdictDetails())
    assert judged_verdict(failed, None, 10, 1) is failed


def test_a_report_is_read_from_its_last_line_and_garbage_is_no_report() -> None:
    good = JudgeReport([CheckedCall(3, "x", None)], seconds={"read": 0.5, "elsewhere": 9.0}).to_json()
    assert JudgeReport.parse("noise\n" + good) == JudgeReport([CheckedCall(3, "x", None)], seconds={"read": 0.5})
    assert JudgeReport.parse("noise\n[1, 2]\n") is None
    assert JudgeReport.parse("") is None



def test_one_file_per_call_and_a_repeat_carries_no_bytes(tmp_path: Path) -> None:
    writer = WitnessWriter(tmp_path / "w")
    first = [torch.randn(64, 64)]
    writer.record(3, "first", first)
    writer.record(3, "second", [first[0].clone()])  # bitwise equal: a repeat
    writer.record(3, "third", [first[0] + 1])  # different: bytes again
    writer.record(4, "other seed", [first[0] + 1])  # the same values for another seed: bytes again
    calls = list(read_witness(tmp_path / "w"))
    assert [(c.label, c.repeat) for c in calls] == [("first", False), ("second", True), ("third", False),
                                                     ("other seed", False)]
    assert torch.equal(calls[2].leaves[0], first[0] + 1)
    assert not same_leaves([torch.zeros(2)], [torch.zeros(2, dtype=torch.float64)])
    assert not same_leaves([1], [1.0]) and same_leaves([1, None], [1, None])


def test_a_witness_folder_is_read_as_hostile_input(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "notes.txt").write_text("ignored")
    (folder / "call-000.bin").write_bytes(written((1, "a", [torch.ones(2)]), (1, "b", [torch.ones(2)])).getvalue())
    with pytest.raises(BadWitness, match="holds 2 calls, not one"):
        list(read_witness(folder))
    for index in range(65):
        (folder / f"call-{index:03d}.bin").write_bytes(MAGIC)
    with pytest.raises(BadWitness, match="more than 64 calls"):
        list(read_witness(folder))
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(OSError):
        list(read_witness(tmp_path / "link"))


def test_a_repeat_with_nothing_before_it_is_refused_by_the_judge(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    with open(folder / "call-000.bin", "wb") as handle:
        handle.write(MAGIC)
        write_call(handle, 8, "claims a repeat", [], repeat=True)
    line = json.dumps({"task_source": TASK, "seed": 7, "witness": str(folder)})
    done = subprocess.run(DEFAULT_JUDGE_COMMAND, input=line, capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, check=True)
    report = JudgeReport.parse(done.stdout)
    assert report is not None and report.error and "follows no call of its seed" in report.error


def test_the_report_is_taken_without_waiting_for_the_judge_to_exit(tmp_path: Path) -> None:
    """A judge that reports and then lingers (a CUDA context's teardown, say) holds nothing up;
    one that never reports fails closed at its time limit."""
    report = JudgeReport([CheckedCall(8, "first", None), CheckedCall(8, "second", None),
                          CheckedCall(987654321, "timed", None)]).to_json()
    lingering = [sys.executable, "-c", f"import sys, time; sys.stdin.readline(); print({report!r}, flush=True); "
                                       "time.sleep(3600)"]
    silent = [sys.executable, "-c", "import time; time.sleep(3600)"]
    for command, passes in ((lingering, True), (silent, False)):
        with WorkerPool([sys.executable, str(STANDIN)], scratch_root=tmp_path / "s", spares=0, judge_command=command,
                        judge_timeout_s=20.0) as pool:
            verdict = pool.run(WorkerJob(TASK, "honest", Path("unset"),
                                         settings=EvalSettings(seed=7, correctness_trials=1))).verdict
        assert verdict.passed is passes, verdict.message
        if not passes:
            assert "did not finish within 20 s" in verdict.message


def test_a_call_too_large_to_write_whole_keeps_a_seeded_sample_of_its_large_outputs(tmp_path: Path) -> None:
    writer = WitnessWriter(tmp_path / "w", full_call_bytes=256, sample_elements=32)
    big, small = torch.randn(8, 16), torch.randn(4)
    writer.record(3, "small call", [torch.randn(16)])  # 64 bytes: whole
    writer.record(3, "large call", [big, small, 2])  # 528 bytes: the 128-element output sampled
    files = sorted((tmp_path / "w").iterdir())
    assert files[1].stat().st_size < 400  # 32 + 4 floats and headers, not 132 floats (528 bytes)
    whole, sampled = list(read_witness(tmp_path / "w"))
    assert isinstance(whole.leaves[0], torch.Tensor) and whole.leaves[0].shape == (16,)
    leaf = sampled.leaves[0]
    assert isinstance(leaf, SampledLeaf) and leaf.shape == [8, 16] and leaf.values.shape == (32,)
    assert torch.equal(leaf.values, big.reshape(-1)[sample_positions(leaf.seed, 128, 32, "cpu")])
    assert torch.equal(sampled.leaves[1], small) and sampled.leaves[2] == 2
    again = WitnessWriter(tmp_path / "v", full_call_bytes=256, sample_elements=32)
    again.record(3, "large call", [big])
    assert next(iter(read_witness(tmp_path / "v"))).leaves[0].seed != leaf.seed  # a fresh seed per call


def test_sample_positions_depend_on_the_seed_alone() -> None:
    first = sample_positions(5, 1000, 50, "cpu")
    assert torch.equal(first, sample_positions(5, 1000, 50, "cpu"))
    assert not torch.equal(first, sample_positions(6, 1000, 50, "cpu"))
    assert int(first.min()) >= 0 and int(first.max()) < 1000


def sampled_header(sample: object) -> bytes:
    leaf = {"dtype": "float32", "shape": [4, 4], "sample": sample}
    return MAGIC + header({"seed": 7, "label": "x", "leaves": [leaf]}) + bytes(64)


@pytest.mark.parametrize(("sample", "words"), [
    ({"seed": 1, "count": 16}, "keeps 16 of its 16 elements"),
    ({"seed": 1, "count": 0}, "keeps 0 of its 16 elements"),
    ({"seed": -1, "count": 4}, "integer seed and count"),
    ({"seed": 1 << 64, "count": 4}, "integer seed and count"),
    ({"seed": "1", "count": 4}, "integer seed and count"),
    ({"seed": 1, "count": 4.0}, "integer seed and count"),
    ([1, 4], "integer seed and count"),
])
def test_a_malformed_sample_is_refused(tmp_path: Path, sample: object, words: str) -> None:
    with pytest.raises(BadWitness, match=words):
        read_all(io.BytesIO(sampled_header(sample)), tmp_path)
