"""ReplayEvaluator: recorded verdicts in order or by marker, real static checks first."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.evaluator import CudaEvaluator, make_evaluator
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.verdict_records import TimingRecord

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
GOOD = (KERNELS / "add_candidate.py").read_text()
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
HACK = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        return a + b\n")


def timing(speedup: float) -> dict:
    return Verdict(
        Stage.TIMING, True, f"fast {speedup}", VerdictDetails(timing=TimingRecord(speedup_vs_eager=speedup))
    ).to_dict()


def incorrect() -> dict:
    return Verdict(Stage.CORRECTNESS, False, "Your answer was incorrect: off by one").to_dict()


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(data))
    return path


def test_ordered_verdicts_wrap_and_are_marked_replay(tmp_path: Path) -> None:
    evaluator = ReplayEvaluator(write(tmp_path, {"verdicts": [timing(1.5), incorrect()]}))
    seen: list[tuple[int, str]] = []
    first = evaluator.evaluate(TASK, [GOOD, GOOD, GOOD], on_verdict=lambda i, v: seen.append((i, v.stage.value)))
    assert [v.stage for v in first] == [Stage.TIMING, Stage.CORRECTNESS, Stage.TIMING]
    assert first[0].speedup == 1.5 and first[1].speedup == 0.0
    assert seen == [(0, "timing"), (1, "correctness"), (2, "timing")]
    assert all(v.details.environment.gpu_name == "replay" for v in first)
    second = evaluator.evaluate(TASK, [GOOD])
    assert second[0].stage is Stage.CORRECTNESS  # continues where the last call stopped
    first[0].details.timing.speedup_vs_eager = 99.0  # verdicts are copies: the recording is untouched
    assert evaluator.evaluate(TASK, [GOOD])[0].details.timing.speedup_vs_eager == 1.5


def test_markers_pick_verdicts(tmp_path: Path) -> None:
    evaluator = ReplayEvaluator(write(tmp_path, {
        "by_marker": {"# kevin-test: slow": timing(0.5), "# kevin-test: wrong": incorrect()},
        "default": timing(2.0),
    }))
    verdicts = evaluator.evaluate(TASK, [GOOD + "\n# kevin-test: wrong\n", GOOD + "\n# kevin-test: slow\n", GOOD])
    assert [v.stage for v in verdicts] == [Stage.CORRECTNESS, Stage.TIMING, Stage.TIMING]
    assert [v.details.timing.speedup_vs_eager for v in verdicts] == [None, 0.5, 2.0]


def test_static_checks_still_reject_hacks(tmp_path: Path) -> None:
    evaluator = ReplayEvaluator(write(tmp_path, {"verdicts": [timing(3.0)]}))
    verdicts = evaluator.evaluate(TASK, [HACK + "\n# kevin-test: fast\n", GOOD])
    assert verdicts[0].stage is Stage.STATIC and not verdicts[0].ok and verdicts[0].details.static_rule
    assert verdicts[1].stage is Stage.TIMING and verdicts[1].speedup == 3.0  # the hack used no verdict


def test_unmatched_candidate_gets_a_load_failure(tmp_path: Path) -> None:
    evaluator = ReplayEvaluator(write(tmp_path, {"by_marker": {"NEVER": timing(1.0)}}))
    verdict = evaluator.evaluate(TASK, [GOOD])[0]
    assert verdict.stage is Stage.LOAD and not verdict.ok and "no verdict" in verdict.message


def test_delay_and_cancel_between_candidates(tmp_path: Path) -> None:
    evaluator = ReplayEvaluator(write(tmp_path, {"verdicts": [timing(1.2)], "delay_s": 0.3}))
    cancel = threading.Event()
    delivered: list[int] = []
    queue: list[tuple[int, int]] = []

    def on_verdict(index: int, verdict: Verdict) -> None:
        delivered.append(index)
        cancel.set()

    started = time.monotonic()
    verdicts = evaluator.evaluate(TASK, [GOOD] * 4, on_verdict=on_verdict, on_queue=lambda c, t: queue.append((c, t)),
                                  cancel=cancel)
    assert time.monotonic() - started < 1.0
    assert delivered == [0]
    assert len(verdicts) == 4 and verdicts[0].ok and all(v.details.error == "cancelled" for v in verdicts[1:])
    assert queue[:2] == [(0, 4), (0, 3)]


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    ('{"other": 1}', "needs 'verdicts'"),
    ('{"verdicts": [{"stage": "warp", "ok": true}]}', "bad verdict at verdicts[0]"),
])
def test_bad_replay_files_are_user_errors(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UserInputError, match=problem.replace("[", r"\[")):
        ReplayEvaluator(path)
    with pytest.raises(UserInputError, match="cannot be read"):
        ReplayEvaluator(tmp_path / "absent.json")


def test_make_evaluator_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, {"verdicts": [timing(1.0)]})
    monkeypatch.delenv("KEVIN_EVALUATOR", raising=False)
    assert isinstance(make_evaluator(None, EvalSettings()), CudaEvaluator)
    assert isinstance(make_evaluator("cuda", EvalSettings()), CudaEvaluator)
    replay = make_evaluator(f"replay:{path}", EvalSettings())
    assert isinstance(replay, ReplayEvaluator) and replay.path == path
    monkeypatch.setenv("KEVIN_EVALUATOR", f"replay:{path}")
    assert isinstance(make_evaluator(None, EvalSettings()), ReplayEvaluator)
    with pytest.raises(UserInputError, match="unknown evaluator"):
        make_evaluator("gpu-please", EvalSettings())
