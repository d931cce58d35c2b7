"""``kevin optimize`` / runs / show as real processes, kill-and-resume, and the openai backend
against the fake vLLM server through the whole session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from loop_fixtures import TASK_FILE, reply, with_verdicts, write_replay, write_script

from kevin_agent.backends import make_backend
from kevin_agent.cli import main
from kevin_agent.config import BackendSettings
from kevin_agent.data import Stage
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.events import RunFailed, TokensGenerated
from kevin_agent.loop.session import RunSettings, Session
from kevin_agent.store import RunStore
from kevin_agent.task import load_task


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    shutil.copy(TASK_FILE, root / "add.py")
    return root


def kevin(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:  # a guard: seconds here
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def optimize_args(repo: Path, plan, delay_s: float = 0.0, *extra: str) -> list[str]:
    script = write_script(repo.parent / "script.json", plan)
    replay = write_replay(repo.parent / "replay.json", delay_s)
    return ["optimize", "add.py::Model", "--backend", "scripted", "--script", str(script),
            "--evaluator", f"replay:{replay}", "--gpu", "NVIDIA H100", *extra]


def test_optimize_table_conclusion_runs_and_show(repo):
    plan = {(0, 0): "broken", (1, 0): "slow", (0, 1): "quick", (1, 1): "wrong"}
    done = kevin(repo, *optimize_args(repo, plan), "--trajectories", "2", "--turns", "2")
    assert done.returncode == 0, done.stderr
    for cid in ("t0.0", "t1.0", "t0.1", "t1.1"):
        assert cid in done.stdout
    assert ("Best kernel t0.1: 2.00x vs eager, 1.33x vs torch.compile, recorded with no GPU named, replayed "
            "here: a win over both") in done.stdout
    assert "t0.1: timing ok, 2.00x vs eager" in done.stderr  # plain progress lines off a terminal

    runs = kevin(repo, "runs")
    assert runs.returncode == 0 and "done" in runs.stdout and "2.00x" in runs.stdout
    show = kevin(repo, "show", "latest", "t0.0")
    assert show.returncode == 0
    assert "stage: compile (FAILED)" in show.stdout and "kernel.cu(3): error: bad" in show.stdout
    assert "class ModelNew" in show.stdout and "Summary of attempt broken." in show.stdout
    unknown = kevin(repo, "show", "latest", "t7.7")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1


def test_optimize_json_says_when_torch_compile_is_better(repo):
    plan = {(0, 0): "modest", (0, 1): "slow"}
    done = kevin(repo, *optimize_args(repo, plan), "-m", "1", "-n", "2", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "done" and summary["resume_command"] is None
    assert summary["best"]["best_id"] == "t0.0" and summary["best"]["win"] is False
    assert summary["best"]["better_choice"] == "torch.compile"
    assert summary["best"]["text"].startswith("torch.compile is the better choice")
    assert [c["candidate_id"] for c in summary["candidates"]] == ["t0.0", "t0.1"]
    assert summary["candidates"][0]["speedup_vs_eager"] == pytest.approx(1.2)
    assert summary["candidates"][0]["speedup_vs_compile"] == pytest.approx(0.8)


def verdict_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0


def judged_ids(db: Path) -> list[str]:
    """The candidates that have a stored verdict."""
    with sqlite3.connect(db, timeout=5) as conn:
        return [row[0] for row in conn.execute("SELECT candidate_id FROM verdicts")]


def test_killed_run_resumes_and_the_store_holds_everything(repo, fake_server):
    """SIGKILL after the first verdict; --resume asks the model only for the unfinished turn
    (every request reaches a real HTTP server, which counts them)."""
    server = fake_server([{"match": "previous attempts", "text": reply("quick")},
                          {"match": "architecture", "text": reply("slow")}])
    replay = write_replay(repo.parent / "replay.json", 3.0)  # verdicts 3 s apart: time to kill after the first
    args = ["optimize", "add.py::Model", "--backend", "openai", "--base-url", server.url,
            "--evaluator", f"replay:{replay}", "--gpu", "NVIDIA H100", "-m", "2", "-n", "2", "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    process = subprocess.Popen([sys.executable, "-m", "kevin_agent", *args], cwd=repo, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = repo / ".kevin" / "runs.sqlite"
    deadline = time.monotonic() + 600  # a guard: the first verdict comes within seconds
    while verdict_count(db) < 1:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no verdict within 600 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL

    interrupted = RunStore.for_path(repo).load_run("latest")
    assert interrupted.status == "running"
    judged = [c.id for c, v in interrupted.candidates if v is not None]
    assert judged == ["t0.0"] and len(interrupted.candidates) == 2
    assert len(server.requests) == 2  # turn 0, both trajectories

    resumed = kevin(repo, "optimize", "--resume", "latest", "--json", "--base-url", server.url)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["run_id"] == interrupted.run_id and summary["status"] == "done"
    final = RunStore.for_path(repo).load_run(interrupted.run_id)
    assert [(c.id, v.stage) for c, v in with_verdicts(final.candidates)] == [
        ("t0.0", Stage.TIMING), ("t1.0", Stage.TIMING), ("t0.1", Stage.TIMING), ("t1.1", Stage.TIMING)]
    assert final.best_speedup() == pytest.approx(2.0)
    assert len(RunStore.for_path(repo).list_runs()) == 1
    # finished work was not redone: t1.0 was only evaluated, and only turn 1 went to the model
    after = server.requests[2:]
    assert len(after) == 2
    assert all("previous attempts" in body["messages"][-1]["content"] for body in after)


def test_cli_errors_are_one_line_with_exit_codes(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    monkeypatch.delenv("KEVIN_BACKEND", raising=False)
    cases = [
        (["optimize"], "name a module"),
        (["optimize", "missing.py::Model", "--backend", "scripted", "--script", "x.json"], "missing.py"),
        (["optimize", "--resume", "nope"], "kevin runs"),
        (["optimize", "--resume", "latest", "-n", "8"], "--turns cannot change when resuming"),
        (["optimize", "add.py::Model", "--backend", "scripted"], "--script"),
        (["optimize", "add.py::Model", "-m", "4", "--beam", "3", "--backend", "scripted",
          "--script", str(write_script(repo.parent / "s.json", {}))], "must divide"),
        (["show", "latest"], "no runs stored yet"),
    ]
    for argv, expected in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert expected in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert not (repo / ".kevin" / "runs.sqlite").exists() or RunStore.for_path(repo).list_runs() == []


def test_failed_backend_exits_nonzero_and_keeps_the_run(repo):
    done = kevin(repo, *optimize_args(repo, {}), "-m", "1", "-n", "1")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "no response left" in last and "--resume" in last
    assert RunStore.for_path(repo).list_runs()[0].status == "failed"


def test_openai_backend_against_the_fake_vllm_server(fake_server, tmp_path):
    server = fake_server([{"text": reply("broken"), "reasoning": "thinking about tiles"},
                          {"text": reply("quick"), "reasoning": "fix the build"}])
    settings = RunSettings(
        trajectories=1, turns=2, gpu_name="NVIDIA H200",
        backend=BackendSettings(backend="openai", base_url=server.url, api_key="test-key",
                                max_retries=0),
    )
    events: list[Any] = []
    store = RunStore(tmp_path / "runs.sqlite")
    record = Session(load_task(f"{TASK_FILE}::Model"), settings, make_backend(settings.backend),
                     ReplayEvaluator(write_replay(tmp_path / "replay.json")), store,
                     events.append).run()
    assert record.status == "done"
    assert [(c.id, v.stage, v.ok) for c, v in with_verdicts(record.candidates)] == [
        ("t0.0", Stage.COMPILE, False), ("t0.1", Stage.TIMING, True)]
    assert record.candidate("t0.0")[0].reasoning.startswith("thinking about tiles")
    second_prompt = server.requests[-1]["messages"][-1]["content"]
    assert "failed to compile" in second_prompt and "### Attempt 1" in second_prompt
    assert any(isinstance(e, TokensGenerated) and e.tokens_by_trajectory.get(0, 0) > 0
               for e in events)


def test_unreachable_server_fails_the_run_with_one_line(tmp_path):
    settings = RunSettings(
        trajectories=2, turns=1, gpu_name="NVIDIA H200",
        backend=BackendSettings(backend="openai", base_url="http://127.0.0.1:9/v1",
                                api_key="k", max_retries=0, timeout_s=5),
    )
    events: list[Any] = []
    store = RunStore(tmp_path / "runs.sqlite")
    record = Session(load_task(f"{TASK_FILE}::Model"), settings, make_backend(settings.backend),
                     ReplayEvaluator(write_replay(tmp_path / "replay.json")), store,
                     events.append).run()
    assert record.status == "failed"
    assert isinstance(events[-1], RunFailed) and "\n" not in events[-1].message
    assert "127.0.0.1:9" in events[-1].message or "connect" in events[-1].message.lower()


def test_ctrl_c_cancels_keeps_finished_work_and_prints_the_resume_command(repo):
    plan = {(i, t): "slow" for i in range(2) for t in range(2)}
    args = optimize_args(repo, plan, 1.0, "-m", "2", "-n", "2")
    script = Path(args[args.index("--script") + 1])
    responses = json.loads(script.read_text())["responses"]
    for item in responses:  # turn 1's replies never come in time: the run cannot end before Ctrl-C
        item["delay_s"] = 600.0 if item["turn"] == 1 else 0.0
    script.write_text(json.dumps({"responses": responses}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    process = subprocess.Popen([sys.executable, "-m", "kevin_agent", *args], cwd=repo, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = repo / ".kevin" / "runs.sqlite"
    deadline = time.monotonic() + 600  # a guard: the first verdict takes seconds
    while verdict_count(db) < 1:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    finished = judged_ids(db)  # t0.0 or t1.0 (turn 0), whichever the evaluator finished first
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 130, err
    record = RunStore.for_path(repo).load_run("latest")
    assert record.status == "cancelled"
    assert f"resume with: kevin optimize --resume {record.run_id}" in err
    for candidate_id in finished:
        assert record.candidate(candidate_id)[1] is not None  # finished work kept
        assert candidate_id in out  # the table of what was done


def test_live_display_shows_tokens_queue_and_best():
    import io

    from loop_fixtures import VERDICTS
    from rich.console import Console

    from kevin_agent.data import Candidate, Verdict
    from kevin_agent.events import CandidateGenerated, QueueChanged, RunStarted, TurnDone, TurnStarted
    from kevin_agent.progress import LiveProgress

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200)
    live = LiveProgress(console)
    for event in (RunStarted("r1", "Model", 2, 4), TurnStarted("r1", 1),
                  TokensGenerated("r1", 1, {0: 1234, 1: 77}), QueueChanged("r1", 1, 2),
                  CandidateGenerated("r1", Candidate(1, 1, id="t1.1", tokens=80)),
                  TurnDone("r1", 1, 2.5)):
        live(event)
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(live._render())
    text = rendered.getvalue()
    assert "turn 1 (0-3)" in text and "compile queue 1" in text and "GPU queue 2" in text
    assert "best 2.50x" in text and "1234" in text and "80" in text and "evaluating" in text
    verdict = Verdict.from_dict(VERDICTS["quick"])
    from kevin_agent.events import VerdictReady
    with live:
        live(VerdictReady("r1", Candidate(0, 1, id="t0.1"), verdict))
    assert "t0.1: timing ok, 2.00x vs eager" in buffer.getvalue()
