"""The Kevin loop with the scripted backend and the replay evaluator (no GPU needed)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from loop_fixtures import TASK_FILE, with_verdicts, write_replay, write_script

from kevin_agent import feedback
from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import BackendSettings
from kevin_agent.data import Stage
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.events import (
    CandidateGenerated,
    RunDone,
    RunFailed,
    RunStarted,
    TurnDone,
    TurnStarted,
    VerdictReady,
)
from kevin_agent.loop.session import RunSettings, Session
from kevin_agent.store import RunStore
from kevin_agent.task import load_task

GPU = "NVIDIA H100 (test)"


def resume(run_id, store, backend, evaluator):
    """The stored run continued (what the run service does for --resume)."""
    record = store.load_run(run_id)
    return Session.resumed(record, RunSettings.from_dict(record.settings), backend, evaluator, store)


@pytest.fixture()
def task():
    return load_task(f"{TASK_FILE}::Model")


@pytest.fixture()
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "store" / "runs.sqlite")


@pytest.fixture()
def replay(tmp_path: Path) -> ReplayEvaluator:
    return ReplayEvaluator(write_replay(tmp_path / "replay.json"))


def settings(**overrides) -> RunSettings:
    base: dict[str, Any] = dict(trajectories=2, turns=3, gpu_name=GPU,
                backend=BackendSettings(backend="scripted", script="unused"))
    base.update(overrides)
    return RunSettings(**base)


def scripted(tmp_path: Path, plan, name: str = "script.json") -> ScriptedBackend:
    return ScriptedBackend(write_script(tmp_path / name, plan))


def last_user(conversation) -> str:
    return [m.content for m in conversation if m.role == "user"][-1]


def test_multi_turn_feedback_reaches_the_next_prompt_and_best_ignores_suspicious(
    tmp_path, task, store, replay
):
    backend = scripted(tmp_path, {
        (0, 0): "broken", (0, 1): "slow", (0, 2): "quick",
        (1, 0): "!I am not sure what to write.", (1, 1): "hack", (1, 2): "wrong",
    })
    events: list[Any] = []
    session = Session(task, settings(), backend, replay, store, events.append)
    record = session.run()

    assert record.status == "done"
    assert [c.id for c, _ in record.candidates] == ["t0.0", "t1.0", "t0.1", "t1.1", "t0.2", "t1.2"]
    stages = {c.id: (v.stage, v.ok) for c, v in with_verdicts(record.candidates)}
    assert stages["t0.0"] == (Stage.COMPILE, False)
    assert stages["t1.0"] == (Stage.FORMAT, False)
    assert stages["t1.1"] == (Stage.TIMING, True)

    turn1, turn2 = backend.requests[1], backend.requests[2]
    assert "kernel.cu(3): error: bad" in last_user(turn1[0])
    assert "failed to compile" in last_user(turn1[0])
    assert "could not be parsed (format error)" in last_user(turn1[1])
    assert feedback.correct(0.8) in last_user(turn2[0])
    assert feedback.correct(40.0) in last_user(turn2[1])
    assert GPU in last_user(backend.requests[0][0])
    # history carries kernel + summary, never the reasoning
    assert "Summary of attempt slow." in last_user(turn2[0])
    assert "Let me fuse the add" not in last_user(turn2[0])

    best = record.best()
    assert best is not None and best[0].id == "t0.2" and best[1].speedup == pytest.approx(2.0)
    assert [e.best_speedup for e in events if isinstance(e, TurnDone)] == [0.0, 0.8, 2.0]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunDone)
    assert events[-1].best is not None and events[-1].best.id == "t0.2" and not events[-1].cancelled
    assert sum(isinstance(e, VerdictReady) for e in events) == 6
    assert sum(isinstance(e, CandidateGenerated) for e in events) == 6

    messages = store.load_messages(record.run_id)
    assert [m.content for m in messages["t0.1"]] == [m.content for m in turn1[0]]
    assert record.parents["t0.2"] == "t0.1" and record.parents["t0.0"] is None


def test_early_stop_at_target_speedup(tmp_path, task, store, replay):
    backend = scripted(tmp_path, {(0, 0): "slow", (1, 0): "quick", (0, 1): "slow", (1, 1): "slow"})
    events: list[Any] = []
    record = Session(task, settings(turns=4, target_speedup=1.5), backend, replay, store,
                     events.append).run()
    assert record.status == "done"
    assert [c.id for c, _ in record.candidates] == ["t0.0", "t1.0"]
    assert len(backend.requests) == 1
    assert sum(isinstance(e, TurnDone) for e in events) == 1
    assert events[-1].best.id == "t1.0"


def test_beam_keeps_the_fastest_and_forks_their_history(tmp_path, task, store, replay):
    plan = {(0, 0): "slow", (1, 0): "quick", (2, 0): "wrong", (3, 0): "fastest"}
    plan.update({(i, t): "slow" for i in range(4) for t in (1, 2)})
    backend = scripted(tmp_path, plan)
    record = Session(task, settings(trajectories=4, turns=3, beam_keep=2), backend, replay,
                     store).run()
    assert record.status == "done"
    parents = record.parents
    assert [parents[f"t{i}.1"] for i in range(4)] == ["t3.0", "t3.0", "t1.0", "t1.0"]
    assert [parents[f"t{i}.2"] for i in range(4)] == ["t0.1", "t0.1", "t1.1", "t1.1"]
    turn1 = backend.requests[1]
    assert all("# kevin-test: fastest" in last_user(turn1[i]) for i in (0, 1))
    assert all("# kevin-test: quick" in last_user(turn1[i]) for i in (2, 3))
    assert record.lineage("t3.2") == ["t3.0", "t1.1", "t3.2"]  # lane 1 had forked from lane 3


def test_beam_must_divide_the_trajectories(tmp_path, task, store, replay):
    with pytest.raises(UserInputError, match="must divide"):
        Session(task, settings(trajectories=4, beam_keep=3), scripted(tmp_path, {}), replay, store)


def test_cancel_mid_turn_keeps_finished_work_and_resume_completes(tmp_path, task, store, replay):
    plan = {(i, t): m for i in range(2) for t, m in enumerate(("slow", "quick", "fastest"))}
    cancel = threading.Event()
    events: list[Any] = []

    def sink(event):
        events.append(event)
        if isinstance(event, VerdictReady) and event.candidate.turn == 1:
            cancel.set()  # the first verdict of turn 1: t1.1 is still waiting for the GPU

    first = Session(task, settings(), scripted(tmp_path, plan), replay, store, sink)
    record = first.run(cancel)
    assert record.status == "cancelled"
    assert isinstance(events[-1], RunDone) and events[-1].cancelled
    kept = {c.id: v for c, v in record.candidates}
    assert set(kept) == {"t0.0", "t1.0", "t0.1", "t1.1"}
    assert kept["t0.1"] is not None and kept["t1.1"] is None  # generated, never judged
    t11_code = record.candidate("t1.1")[0].code

    backend = scripted(tmp_path, plan, "script2.json")
    resumed = resume(record.run_id, store, backend, ReplayEvaluator(replay.path))
    final = resumed.run()
    assert final.status == "done" and final.run_id == record.run_id
    assert len(final.candidates) == 6 and all(v is not None for _, v in final.candidates)
    assert len(backend.requests) == 1  # only turn 2 asked the model; t1.1 was only evaluated
    assert final.candidate("t1.1")[0].code == t11_code
    assert final.candidate("t1.1")[1].speedup == pytest.approx(2.0)
    assert final.best()[0].id in {"t0.2", "t1.2"}


def test_cancel_during_generation_then_resume_redoes_the_turn(tmp_path, task, store, replay):
    plan = {(i, t): "slow" for i in range(2) for t in range(2)}
    cancel = threading.Event()

    def sink(event):
        if isinstance(event, TurnStarted) and event.turn == 1:
            cancel.set()

    record = Session(task, settings(turns=2), scripted(tmp_path, plan), replay, store, sink).run(cancel)
    assert record.status == "cancelled"
    assert [c.id for c, _ in record.candidates] == ["t0.0", "t1.0"]

    backend = scripted(tmp_path, plan, "again.json")
    final = resume(record.run_id, store, backend, replay).run()
    assert [c.id for c, _ in final.candidates] == ["t0.0", "t1.0", "t0.1", "t1.1"]
    assert len(backend.requests) == 1 and len(backend.requests[0]) == 2
    with pytest.raises(UserInputError, match="already done"):
        resume(record.run_id, store, backend, replay)


def test_all_requests_failing_fails_the_run_but_keeps_it(tmp_path, task, store, replay):
    backend = ScriptedBackend([{"trajectory": 0, "turn": 0, "error": "HTTP 500 from the server"},
                               {"trajectory": 1, "turn": 0, "error": "HTTP 500 from the server"}])
    events: list[Any] = []
    session = Session(task, settings(), backend, replay, store, events.append)
    record = session.run()
    assert record.status == "failed"
    assert isinstance(events[-1], RunFailed) and "HTTP 500" in events[-1].message
    assert "\n" not in events[-1].message
    assert store.load_run(record.run_id).error == events[-1].message
    assert store.list_runs()[0].status == "failed"


def test_one_failed_request_is_recorded_as_a_format_failure(tmp_path, task, store, replay):
    backend = ScriptedBackend([
        {"trajectory": 0, "turn": 0, "error": "connection reset"},
        {"trajectory": 1, "turn": 0, "text": __import__("loop_fixtures").reply("quick")},
    ])
    record = Session(task, settings(turns=1), backend, replay, store).run()
    assert record.status == "done"
    candidate, verdict = record.candidate("t0.0")
    assert verdict is not None and verdict.stage is Stage.FORMAT and not verdict.ok
    assert "connection reset" in verdict.message
    best = record.best()
    assert best is not None and best[0].id == "t1.0"
