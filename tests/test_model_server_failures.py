"""An unreachable or failing model server, as a user meets it through ``kevin optimize``: one line
naming what failed, the URL and what to check; retries shown as progress; no table and no
conclusion for a run that produced nothing; a request the server refuses stays that candidate's
error (docs/backends.md). Real HTTP (tests/fake_vllm_server.py) and a really closed port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fake_vllm_server import fake_server  # noqa: F401  (pytest fixture)
from loop_fixtures import TASK_FILE, reply, write_replay

from kevin_agent.backends.base import SamplingParams
from kevin_agent.backends.openai_backend import OpenAIBackend
from kevin_agent.config import BackendSettings
from kevin_agent.data import Message, Stage
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.loop.session import RunSettings, Session
from kevin_agent.run_record import RunRecord, RunStatus
from kevin_agent.run_table import conclude
from kevin_agent.store import RunStore
from kevin_agent.task import load_task

BOOM = {"error": {"status": 503, "message": "engine is warming up", "type": "ServiceUnavailableError"}}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed once we leave: nothing listens there


def optimize(tmp_path: Path, base_url: str) -> subprocess.CompletedProcess:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copy(TASK_FILE, repo / "add.py")
    (repo / "kevin.toml").write_text("max_retries = 2\n")
    replay = write_replay(tmp_path / "replay.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "kevin_agent", "optimize", "add.py::Model", "-m", "2",
                           "-n", "1", "--base-url", base_url, "--evaluator", f"replay:{replay}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def _failure_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "model request failed" in line]


def test_unreachable_server_is_one_line_with_url_and_what_to_check(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    proc = optimize(tmp_path, url)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""  # no empty table, no "keep the PyTorch module"
    [line] = _failure_lines(proc)  # said once
    assert line.startswith(f"kevin optimize: model request failed: cannot reach {url}: ")
    assert "after 3 attempts; check that the server runs there" in line and "--base-url" in line
    assert "resume with: kevin optimize --resume " in line
    retries = [line for line in proc.stderr.splitlines() if "; retry " in line]
    assert [r.split("; retry ")[1].split(" in ")[0] for r in retries] == ["1 of 2", "2 of 2"]  # once per round
    assert all(f"model server: cannot reach {url}" in r for r in retries)
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 5  # start, turn, 2 retries, failure


def test_server_failing_with_5xx_after_retries_ends_the_run(tmp_path: Path, fake_server) -> None:  # noqa: F811
    server = fake_server([{"match": "", **BOOM}])
    proc = optimize(tmp_path, server.url)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    [line] = _failure_lines(proc)
    assert f"HTTP 503 from {server.url}: engine is warming up after 3 attempts; check the server's log" in line
    assert len(server.requests) == 6  # 2 trajectories x 3 attempts


def test_a_refused_request_is_that_candidates_error_but_a_down_server_ends_the_run(tmp_path: Path,
                                                                                     fake_server) -> None:  # noqa: F811
    task = load_task(str(TASK_FILE) + "::Model")
    evaluator = ReplayEvaluator(write_replay(tmp_path / "replay.json"))
    refused = fake_server([{"text": reply("quick")},
                           {"error": {"status": 400, "message": "prompt too long", "type": "BadRequestError"}}])
    backend = OpenAIBackend(BackendSettings(base_url=refused.url, max_retries=1, concurrency=1), backoff_base_s=0.01)
    settings = RunSettings(trajectories=2, turns=1)
    record = Session(task, settings, backend, evaluator, RunStore(tmp_path / "a.sqlite")).run()
    assert record.status == "done"
    refused_verdict = record.candidate("t1.0")[1]
    assert refused_verdict is not None
    assert refused_verdict.stage is Stage.FORMAT and "prompt too long" in refused_verdict.message

    down = fake_server([{"text": reply("quick")}, BOOM, BOOM])
    backend = OpenAIBackend(BackendSettings(base_url=down.url, max_retries=1, concurrency=1), backoff_base_s=0.01)
    seen: list[object] = []
    record = Session(task, settings, backend, evaluator, RunStore(tmp_path / "b.sqlite"), seen.append).run()
    assert record.status == "failed" and record.candidates == []  # resumable: the turn is asked again
    assert (record.error or "").startswith(f"model request failed: HTTP 503 from {down.url}")
    assert [type(e).__name__ for e in seen].count("ModelRetrying") == 1


def test_retry_rounds_are_reported_once_each_for_the_whole_batch(fake_server) -> None:  # noqa: F811
    server = fake_server([BOOM, BOOM, BOOM] + [{"text": "done"}] * 3)  # each of 3 requests fails once
    # a backoff long against the batch's requests arriving (a loaded machine staggers them): every
    # request has failed once before the first retry, so the three failures are one round
    backend = OpenAIBackend(BackendSettings(base_url=server.url, max_retries=3), backoff_base_s=2.0)
    lines: list[str] = []
    backend.on_retry = lines.append
    results = backend.complete([[Message("user", f"go {i}")] for i in range(3)], SamplingParams())
    assert [r.text for r in results] == ["done"] * 3
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"model server: HTTP 503 from {server.url}: engine is warming up; retry 1 of 3 in ")


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_an_unfinished_run_never_concludes_to_keep_the_module(status: RunStatus) -> None:
    record = RunRecord(run_id="r", status=status, task=load_task(str(TASK_FILE) + "::Model"), settings={},
                       created="", candidates=[])
    text = conclude(record).text
    assert "keep the PyTorch module" not in text
    assert text == f"No correct kernel so far: the run {'was cancelled' if status == 'cancelled' else 'failed'} " \
                   "before it finished."
