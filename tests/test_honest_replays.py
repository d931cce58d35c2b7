"""A replayed verdict is served only for the task and the code it judged (hashes recorded with it),
and every face, `kevin accept` included, draws the same conclusion from it and says where it was
measured."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from accept_support import MODULE, fixture_candidate, make_record, make_repo

from kevin_agent.accept import plan_accept
from kevin_agent.backends.base import Completion
from kevin_agent.cli import main
from kevin_agent.data import Stage, Task, Verdict
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.parsing import parse_completion
from kevin_agent.task import load_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []
"""


def _answers() -> dict[str, str]:
    """candidate id -> code of each recorded reply."""
    replies = json.loads((EXAMPLES / "replies.json").read_text())["responses"]
    parsed = [parse_completion(Completion(text=r["text"]), r["trajectory"], r["turn"]) for r in replies]
    return {c.id: c.code or "" for c in parsed}


def _gelu() -> Task:
    return load_task(f"{EXAMPLES / 'fused_gelu.py'}::FusedGELU")


def test_the_examples_hashes_are_those_of_the_files_they_judged(tmp_path):
    """Editing fused_gelu.py or replies.json without recording again breaks this (and the replay)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import record_verdicts
    finally:
        sys.path.remove(str(EXAMPLES))
    copy = tmp_path / "verdicts.json"
    shutil.copy(EXAMPLES / "verdicts.json", copy)
    assert record_verdicts.rehash(copy) == 0
    assert json.loads(copy.read_text()) == json.loads((EXAMPLES / "verdicts.json").read_text())
    bound = [v["recorded_for"] for v in json.loads(copy.read_text())["by_marker"].values()]
    assert len({b["task_sha256"] for b in bound}) == 1 and len({b["code_sha256"] for b in bound}) == 4


def test_another_task_is_refused_in_one_line():
    relu = Task(source=RELU, class_name="Model")
    with pytest.raises(UserInputError) as refused:
        ReplayEvaluator(EXAMPLES / "verdicts.json").evaluate(relu, [_answers()["t1.1"]])
    text = str(refused.value)
    assert "recorded for another task (FusedGELU)" in text and "\n" not in text


def test_the_recorded_answers_replay_on_their_task_and_edited_code_gets_no_numbers():
    answers = _answers()
    evaluator = ReplayEvaluator(EXAMPLES / "verdicts.json")
    fast, edited = evaluator.evaluate(_gelu(), [answers["t1.1"], answers["t1.1"] + "\n# edited\n"])
    assert fast.ok and fast.details.timing.speedup_vs_eager is not None and fast.details.timing.speedup_vs_eager > 3
    assert edited.stage is Stage.LOAD and not edited.ok and edited.details.timing.speedup_vs_eager is None
    assert "judged other code" in edited.message and "# demo answer t1.1" in edited.message


def test_a_different_answer_carrying_a_recorded_marker_gets_no_numbers():
    """The marker alone picked the verdict before: any code with `# demo answer t1.1` got 3.37x."""
    impostor = _answers()["t1.0"].replace("# demo answer t1.0 (one thread per row)",
                                          "# demo answer t1.1 (fused, float4)")
    verdict = ReplayEvaluator(EXAMPLES / "verdicts.json").evaluate(_gelu(), [impostor])[0]
    assert not verdict.ok and verdict.details.timing.speedup_vs_eager is None


def test_a_recording_without_hashes_is_refused_with_what_to_do():
    with pytest.raises(UserInputError, match=r"recorded without the task and code hashes.*record it again"):
        ReplayEvaluator(ROOT / "tests" / "fixtures" / "verdicts_flat_2026-12-03.json")


def test_hand_written_doubles_without_a_recording_still_match_by_marker(tmp_path):
    verdict = Verdict(Stage.TIMING, True, "fast").to_dict()
    path = tmp_path / "double.json"
    path.write_text(json.dumps({"by_marker": {"# demo answer t1.1": verdict}}))
    assert ReplayEvaluator(path).evaluate(Task(source=RELU, class_name="Model"), [_answers()["t1.1"]])[0].ok


def test_bench_on_a_relu_task_prints_none_of_fused_gelus_numbers(tmp_path, monkeypatch, capsys):
    tasks = tmp_path / "level1"
    tasks.mkdir()
    (tasks / "19_ReLU.py").write_text(RELU)
    monkeypatch.chdir(tmp_path)
    code = main(["bench", str(tmp_path), "-m", "2", "-n", "2", "--backend", "scripted",
                 "--script", str(EXAMPLES / "replies.json"), "--evaluator", f"replay:{EXAMPLES / 'verdicts.json'}"])
    out = capsys.readouterr()
    assert code != 0
    assert "recorded for another task (FusedGELU)" in out.err
    assert "3.37x" not in out.out + out.err and "1.25x" not in out.out + out.err


def _recorded_tie() -> Verdict:
    """t1.1 as recorded on the H200: 3.37x eager, 0.99x torch.compile, within the timing noise."""
    raw = json.loads((EXAMPLES / "verdicts.json").read_text())["by_marker"]["# demo answer t1.1 (fused, float4)"]
    verdict = Verdict.from_dict(raw)
    verdict.details.environment.replayed = True
    return verdict


def test_accept_draws_the_conclusion_every_face_draws_and_says_where_it_was_measured(tmp_path):
    make_repo(tmp_path)
    verdict = _recorded_tie()
    run = verdict.details.environment.measured_in
    plan = plan_accept(make_record(tmp_path / MODULE, fixture_candidate("gelu"), verdict), repo_root=tmp_path)
    notes = " ".join(plan.notes)
    assert "on this GPU" not in notes and "torch.compile is faster" not in notes
    assert f"measured on NVIDIA H200 in run {run}, replayed here) is a tie with torch.compile" in notes
    flat = " ".join(plan.commit_message.split())
    assert "ties with torch.compile where it was measured" in flat and "on this GPU" not in flat
