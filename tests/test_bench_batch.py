"""``kevin bench`` judges a corpus as one batch: tasks play side by side against one evaluator.

A replies corpus of several tasks goes through ``bench_cmd.bench`` with a run service holding a
stand-in evaluator. The verdicts stored for every task's candidates are those the same evaluator
gives each answer alone, and the evaluator saw several tasks' candidates at once: each stand-in
waits (a guard, not a timing) until the wanted number of calls or builds are in flight together,
and records the most it saw, so a benchmark played one task after another fails here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from loop_fixtures import TASK_FILE, reply, timed

from kevin_agent.benchmark.eta import BenchEta
from kevin_agent.commands import bench_cmd
from kevin_agent.data import Stage, Task, Verdict
from kevin_agent.evaluate.api import EvalSettings, Evaluator, QueueCallback, VerdictCallback, WaitCallback
from kevin_agent.evaluate.build.compile import CompileOutcome
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.evaluate.scheduling import Target
from kevin_agent.runs.service import RunService
from kevin_agent.store import RunStore
from kevin_agent.task import load_task

GUARD_S = 60.0  # how long a stand-in waits for company before giving up (only a failing run waits)
# task file -> the markers of its recorded replies ("!" : a reply with no code, a format error)
CORPUS = {"1_Add.py": ["a", "b"], "2_Add_more.py": ["c"], "3_Add_again.py": ["d", "broken", "!"],
          "4_Add_last.py": ["e"]}


class Gathering:
    """Counts calls in flight; each waits (up to GUARD_S) until ``meet`` are in flight together."""

    def __init__(self, meet: int) -> None:
        self.meet, self.in_flight, self.peak = meet, 0, 0
        self._met = meet <= 1
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self._met = self._met or self.in_flight >= self.meet
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._met, timeout=GUARD_S)
            self._met = True  # met, or the guard ran out: nobody waits again (the peak tells)

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self.in_flight -= 1


def judge(task: Task, code: str) -> Verdict:
    """A verdict that depends on the task and the code alone: an answer credited to the wrong
    task, or another answer's verdict, shows."""
    digest = hashlib.sha256((task.source + "\0" + code).encode()).hexdigest()
    if "-broken\n" in code:
        return Verdict(Stage.COMPILE, False, f"does not build ({digest[:12]})")
    verdict = Verdict.from_dict(timed(1.0 + int(digest[:4], 16) / 65536 * 3))
    verdict.message = f"{verdict.message} ({digest[:12]})"
    return verdict


class StreamEvaluator(Evaluator):
    """Deterministic stand-in: ``judge`` per candidate; records each call's task and size."""

    gpu_name = "stand-in GPU"

    def __init__(self, meet: int = 1) -> None:
        self.gathering = Gathering(meet)
        self.calls: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def evaluate(self, task: Task, codes: Sequence[str], *, on_verdict: Optional[VerdictCallback] = None,
                 on_queue: Optional[QueueCallback] = None, cancel: Optional[threading.Event] = None,
                 on_wait: Optional[WaitCallback] = None) -> list[Verdict]:
        with self._lock:
            self.calls.append((task.source, len(codes)))
        with self.gathering:
            verdicts = [judge(task, code) for code in codes]
        for index, verdict in enumerate(verdicts):
            if on_verdict is not None:
                on_verdict(index, verdict)
        return verdicts


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """A repository with four distinct KernelBench-style tasks and a replies file naming them."""
    root = tmp_path / "repo"
    lines = []
    for number, (name, markers) in enumerate(CORPUS.items()):
        path = root / "kb" / "level1" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        source = TASK_FILE.read_text()
        assert "ROWS = 4096\n" in source
        path.write_text(source.replace("ROWS = 4096\n", f"ROWS = {4096 + 8 * number}\n"))  # four different tasks
        for marker in markers:
            text = "no code here, sorry" if marker == "!" else reply(f"{name}-{marker}")
            lines.append({"task": f"kb/level1/{name}", "reply": text})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "replies.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def play(root: Path, evaluator: Evaluator, parallel: int, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any], str]:
    monkeypatch.chdir(root)
    with RunService(environ={}, evaluator=evaluator) as service:
        code = bench_cmd.bench(parse("--replies", "replies.jsonl", "--json", "--parallel", str(parallel)), service)
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else {}, out.err


def stored_verdicts(root: Path, result: dict[str, Any]) -> dict[tuple[str, int], tuple[Optional[str], dict]]:
    """(task name, trajectory) -> (the candidate's code, its stored verdict)."""
    found = {}
    with RunStore.for_path(root) as store:
        for task in result["tasks"]:
            for candidate, verdict in store.load_run(task["run_id"]).candidates:
                assert verdict is not None, (task["name"], candidate.id)
                found[(task["name"], candidate.trajectory)] = (candidate.code, verdict.to_dict())
    return found


def test_a_corpus_is_judged_as_one_stream_with_the_verdicts_of_each_answer_alone(corpus, capsys, monkeypatch):
    evaluator = StreamEvaluator(meet=3)
    code, result, err = play(corpus, evaluator, 3, capsys, monkeypatch)
    assert code == 0, err
    assert evaluator.gathering.peak >= 3  # three tasks' candidates were with the evaluator at once
    assert len({source for source, _ in evaluator.calls}) == 4  # one batch per task (the format error never came)
    assert sorted(size for _, size in evaluator.calls) == [1, 1, 2, 2]
    stored = stored_verdicts(corpus, result)
    assert len(stored) == 7
    alone = StreamEvaluator()
    for name, markers in CORPUS.items():
        task = load_task(f"{corpus / 'kb' / 'level1' / name}::Model")
        for trajectory, marker in enumerate(markers):
            code_seen, verdict = stored[(f"level1/{Path(name).stem}", trajectory)]
            if marker == "!":
                assert code_seen is None and verdict["stage"] == "format"
                continue
            assert f"# kevin-test: {name}-{marker}\n" in (code_seen or "")
            assert verdict == alone.evaluate(task, [code_seen or ""])[0].to_dict(), (name, marker)
    assert {t["name"]: t["candidates"] for t in result["tasks"]} == {
        "level1/1_Add": 2, "level1/2_Add_more": 1, "level1/3_Add_again": 3, "level1/4_Add_last": 1}
    done_lines = [line for line in err.splitlines() if "] level1/" in line]
    assert sorted(line.split("]")[0] for line in done_lines) == ["kevin bench: [1/4", "kevin bench: [2/4",
                                                                 "kevin bench: [3/4", "kevin bench: [4/4"]
    assert "ETA" in " ".join(done_lines[:3]) and "candidates judged" in done_lines[0]


def test_one_task_at_a_time_is_the_control(corpus, capsys, monkeypatch):
    """With --parallel 1 the evaluator never sees two tasks at once (the check above can fail)."""
    evaluator = StreamEvaluator(meet=2)
    monkeypatch.setattr(sys.modules[__name__], "GUARD_S", 0.5)
    code, _, err = play(corpus, evaluator, 1, capsys, monkeypatch)
    assert code == 0, err
    assert evaluator.gathering.peak == 1


class GatedCompiler:
    """A stand-in build: waits until ``meet`` builds run together; a "broken" answer fails."""

    def __init__(self, meet: int) -> None:
        self.gathering = Gathering(meet)

    def __call__(self, code: str, cache: Any, cancel: threading.Event) -> CompileOutcome:
        with self.gathering:
            pass
        if "-broken\n" in code:
            return CompileOutcome(False, "Your answer failed to compile: stand-in")
        return CompileOutcome(True, "")


def cuda_evaluator(tmp_path: Path, compiler: GatedCompiler) -> CudaEvaluator:
    settings = EvalSettings(compile_only=True, arch="9.0", cache_dir=tmp_path / "cache", sandbox="off")
    return CudaEvaluator(settings, compiler=compiler, jobs=4, environment=lambda: Target("9.0", "stand-in GPU"))


def test_the_real_pipeline_builds_several_tasks_candidates_at_once(corpus, tmp_path, capsys, monkeypatch):
    compiler = GatedCompiler(meet=4)
    evaluator = cuda_evaluator(tmp_path, compiler)
    try:
        code, result, err = play(corpus, evaluator, 4, capsys, monkeypatch)
    finally:
        evaluator.close()
    assert code == 0, err
    assert compiler.gathering.peak >= 4  # builds of different tasks overlapped in its one compile pool
    stored = stored_verdicts(corpus, result)
    alone = cuda_evaluator(tmp_path, GatedCompiler(meet=1))
    try:
        for name, markers in CORPUS.items():
            task = load_task(f"{corpus / 'kb' / 'level1' / name}::Model")
            for trajectory, marker in enumerate(markers):
                code_seen, verdict = stored[(f"level1/{Path(name).stem}", trajectory)]
                if marker != "!":
                    assert verdict == alone.evaluate(task, [code_seen or ""])[0].to_dict(), (name, marker)
    finally:
        alone.close()
    assert stored[("level1/3_Add_again", 1)][1]["ok"] is False


def test_the_eta_is_wall_time_per_candidate_judged_times_what_is_left():
    now = [100.0]
    eta = BenchEta({0: 4, 1: 4, 2: 2}, clock=lambda: now[0])
    assert eta.text() == ""  # nothing judged yet: no guess
    now[0] = 130.0
    for _ in range(3):
        eta.judged_one(0)
    assert eta.seconds_left() == pytest.approx(30.0 / 3 * 7)  # 1 + 4 + 2 left
    eta.finished(0)  # it stopped early (target reached): its last candidate is not waited for
    assert eta.seconds_left() == pytest.approx(60.0)
    assert eta.text() == "; ETA 1 min (3 candidates judged, one every 10.0 s)"
    eta.judged_one(2)
    eta.judged_one(2)
    eta.finished(2)
    eta.finished(1)
    assert eta.seconds_left() is None and eta.done == 3


def test_a_second_copy_of_each_task_gets_a_run_id_of_its_own(corpus, capsys, monkeypatch):
    """Tasks that start in the same second never share a run id (ids carry the second)."""
    from kevin_agent.loop import session

    monkeypatch.setattr(session, "new_run_id", iter(["same", "same", "same", "x1", "x2", "x3"]).__next__)
    code, result, err = play(corpus, StreamEvaluator(), 4, capsys, monkeypatch)
    assert code == 0, err
    assert len({t["run_id"] for t in result["tasks"]}) == 4
