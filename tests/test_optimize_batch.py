"""``kevin optimize A.py::X B.py::Y``: several classes as one batch (issue 42), with the scripted
backend and recorded verdicts (the model and the GPU cannot run here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from loop_fixtures import TASK_FILE, write_replay, write_script

import kevin_agent.runs.service as service_module
from kevin_agent.cli import main
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.store import RunStore

PLAN = {(0, 0): "slow", (0, 1): "quick"}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A git repository with two task files: ``add.py::Model`` and ``twice.py::AddTwice``."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    shutil.copy(TASK_FILE, root / "add.py")
    (root / "twice.py").write_text(TASK_FILE.read_text().replace("class Model(", "class AddTwice("))
    return root


def batch_args(repo: Path, *targets: str) -> list[str]:
    script = write_script(repo.parent / "script.json", PLAN)
    replay = write_replay(repo.parent / "replay.json")
    return ["optimize", *targets, "--backend", "scripted", "--script", str(script), "--evaluator",
            f"replay:{replay}", "--gpu", "NVIDIA H100", "-m", "1", "-n", "2"]


def kevin(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # a guard against a hang, not a limit


def test_two_classes_play_as_one_batch_each_with_its_own_stored_run(repo: Path) -> None:
    done = kevin(repo, *batch_args(repo, "add.py::Model", "twice.py::AddTwice"), "--json")
    assert done.returncode == 0, done.stderr
    summaries = json.loads(done.stdout)
    assert isinstance(summaries, list) and len(summaries) == 2
    assert [s["status"] for s in summaries] == ["done", "done"]
    assert summaries[0]["run_id"] != summaries[1]["run_id"]
    assert [s["best"]["best_id"] for s in summaries] == ["t0.1", "t0.1"]
    assert "2 classes as one batch: Model (run" in done.stderr and "AddTwice (run" in done.stderr
    assert "[Model]   t0.1: timing ok, 2.00x vs eager" in done.stderr
    assert "[AddTwice]   t0.1: timing ok, 2.00x vs eager" in done.stderr
    stored = {run.run_id: run for run in RunStore.for_path(repo).list_runs()}
    assert set(stored) == {s["run_id"] for s in summaries}
    assert {run.status for run in stored.values()} == {"done"}


def test_the_batch_tables_print_one_after_another(repo: Path) -> None:
    done = kevin(repo, *batch_args(repo, "add.py::Model", "twice.py::AddTwice"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Best kernel t0.1: 2.00x vs eager") == 2


def test_a_bad_second_target_starts_nothing_and_says_so_in_one_line(repo: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(repo)
    for key in [k for k in os.environ if k.startswith("KEVIN_")]:
        monkeypatch.delenv(key)
    code = main(batch_args(repo, "add.py::Model", "missing.py::Model"))
    err = capsys.readouterr().err
    assert code == 2 and "missing.py" in err and err.count("\n") == 1, err
    assert not (repo / ".kevin" / "runs.sqlite").exists() or RunStore.for_path(repo).list_runs() == []


def test_resume_with_several_targets_is_refused(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(repo)
    code = main(["optimize", "add.py::Model", "twice.py::AddTwice", "--resume", "latest"])
    err = capsys.readouterr().err
    assert code == 2 and "not both" in err and err.count("\n") == 1, err


def test_every_class_of_the_batch_is_judged_by_the_one_evaluator(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    opened: list[Any] = []
    real = service_module._open_evaluator

    def counting(spec: Optional[str], settings: EvalSettings) -> Any:
        evaluator = real(spec, settings)
        opened.append(evaluator)
        return evaluator

    monkeypatch.setattr(service_module, "_open_evaluator", counting)
    monkeypatch.chdir(repo)
    code = main(batch_args(repo, "add.py::Model", "twice.py::AddTwice", "add.py::Model"))
    capsys.readouterr()
    assert code == 0
    assert len(opened) == 1
    runs = RunStore.for_path(repo).list_runs()
    assert len(runs) == 3 and len({run.run_id for run in runs}) == 3
