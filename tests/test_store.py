"""The SQLite run store: location, git-ignoring, writes as they happen, threads, lookups."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from kevin_agent.config import BackendSettings
from kevin_agent.data import Candidate, Message, Stage, Task, TaskOrigin, Verdict
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.loop.session import RunSettings
from kevin_agent.store import RunStore

TASK = Task(source="class Model: ...\n", class_name="Model",
            origin=TaskOrigin("models/add.py", "Add", 3, 9))


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_store_lives_at_the_repo_root_and_git_ignores_it(tmp_path):
    repo = git_repo(tmp_path / "repo")
    nested = repo / "src" / "pkg"
    nested.mkdir(parents=True)
    store = RunStore.for_path(nested)
    assert store.path == repo / ".kevin" / "runs.sqlite"
    assert (repo / ".kevin" / ".gitignore").read_text().strip() == "*"
    store.create_run("r1", TASK, {"trajectories": 1})
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    assert ".kevin" not in status
    assert RunStore.for_path(repo).load_run("r1").task == TASK


def test_store_outside_a_repo_uses_the_given_folder(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    store = RunStore.for_path(folder)
    assert store.path == folder / ".kevin" / "runs.sqlite"
    assert store.path.exists()


def test_rows_are_visible_to_another_connection_as_soon_as_written(tmp_path):
    writer = RunStore(tmp_path / "runs.sqlite")
    reader = RunStore(tmp_path / "runs.sqlite")
    writer.create_run("r1", TASK, {"turns": 2})
    candidate = Candidate(trajectory=0, turn=0, response="text", code="code", summary="sum",
                          tokens=12, id="t0.0")
    writer.add_candidate("r1", candidate, [Message("user", "the prompt")])
    seen = reader.load_run("r1")
    assert seen.status == "running"
    assert [(c.id, c.code, c.tokens, v) for c, v in seen.candidates] == [("t0.0", "code", 12, None)]
    assert reader.load_messages("r1")["t0.0"] == [Message("user", "the prompt")]
    writer.add_verdict("r1", "t0.0", Verdict(Stage.COMPILE, False, "no"))
    assert getattr(reader.load_run("r1").candidates[0][1], "stage", None) is Stage.COMPILE
    writer.set_status("r1", "failed", "server down")
    again = reader.load_run("r1")
    assert (again.status, again.error) == ("failed", "server down")


def test_concurrent_writers_from_threads(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r1", TASK, {})

    def write(trajectory: int) -> None:
        for turn in range(10):
            cid = f"t{trajectory}.{turn}"
            store.add_candidate("r1", Candidate(trajectory, turn, id=cid, code="x"), [])
            store.add_verdict("r1", cid, Verdict(Stage.FORMAT, False, "bad"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record = store.load_run("r1")
    assert len(record.candidates) == 80
    assert all(v is not None for _, v in record.candidates)


def test_latest_prefix_and_unknown_runs(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    with pytest.raises(UserInputError, match="no runs stored yet"):
        store.load_run("latest")
    store.create_run("20250101-aaaa", TASK, {})
    store.create_run("20250102-bbbb", TASK, {})
    assert store.load_run("latest").run_id == "20250102-bbbb"
    assert store.load_run("20250101").run_id == "20250101-aaaa"
    with pytest.raises(UserInputError, match="kevin runs"):
        store.load_run("nope")
    with pytest.raises(UserInputError, match="kevin runs"):
        store.load_run("2025")  # ambiguous prefix
    with pytest.raises(UserInputError, match="ambiguous .2 runs: 20250101-aaaa, 20250102-bbbb"):
        store.load_run("2025")
    runs = store.list_runs()
    assert [r.run_id for r in runs] == ["20250102-bbbb", "20250101-aaaa"]
    assert runs[0].source_path == "models/add.py" and runs[0].best_speedup is None


def test_a_status_the_store_does_not_know_is_one_line_naming_the_store(tmp_path):
    import sqlite3

    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("20250101-aaaa", TASK, {})
    with pytest.raises(ValueError, match="unknown run status 'paused'"):
        store.set_status("20250101-aaaa", "paused")  # type: ignore[arg-type]  # what the checker would refuse
    store.close()
    with sqlite3.connect(tmp_path / "runs.sqlite") as edited:
        edited.execute("UPDATE runs SET status = 'paused'")
    store = RunStore(tmp_path / "runs.sqlite")
    for read in (store.list_runs, lambda: store.load_run("latest")):
        with pytest.raises(EnvironmentProblem, match=r"runs.sqlite holds unknown run status 'paused' \(expected one"):
            read()
    store.close()


def test_api_keys_never_reach_the_store(tmp_path):
    settings = RunSettings(backend=BackendSettings(api_key="sk-very-secret-key"))
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r1", TASK, settings.to_dict())
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("runs.sqlite"))
    assert b"sk-very-secret-key" not in raw
    restored = RunSettings.from_dict(RunStore(tmp_path / "runs.sqlite").load_run("r1").settings)
    assert restored.backend.api_key is None and restored.trajectories == 4


def test_unknown_candidate_lists_what_exists(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r1", TASK, {})
    store.add_candidate("r1", Candidate(0, 0, id="t0.0"), [])
    with pytest.raises(UserInputError, match=r"t0\.0"):
        store.load_run("r1").candidate("t9.9")


def test_a_database_failure_is_one_line_not_a_traceback(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r1", TASK, {})
    store._conn.execute("DROP TABLE verdicts")  # stands in for a corrupt or locked database
    with pytest.raises(EnvironmentProblem, match="the run store .* failed: no such table"):
        store.list_runs()
    with pytest.raises(EnvironmentProblem, match="failed"):
        store.add_verdict("r1", "t0.0", Verdict(stage=Stage.FORMAT, ok=False, message="x"))
