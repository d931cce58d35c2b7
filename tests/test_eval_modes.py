"""The evaluation contract's two modes (``kevin_agent.eval_modes``): defined once, parsed once where
settings are resolved, a bad value one line and exit 2 at every entry point (flag, environment,
config file, stored run, worker job; the editor names it and keeps its default), never a silent
strict, and the parsed value carried unchanged into the GPU worker's job."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, get_args

import pytest
from loop_fixtures import TASK_FILE, write_replay, write_script

from kevin_agent import config as config_module
from kevin_agent.errors import UserInputError
from kevin_agent.eval_modes import POLICIES, SANDBOX_MODES, Policy, SandboxMode, parse_policy, parse_sandbox_mode
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import BadJob, WorkerJob
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.service import RunService

ROOT = Path(__file__).resolve().parents[1]
ADD_TASK = str(TASK_FILE)
ADD_CANDIDATE = str(TASK_FILE.parent / "add_candidate.py")
POLICY_ERROR = "(expected one of strict, partial)"
SANDBOX_ERROR = "(expected one of auto, required, off)"


def kevin(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command line, in ``cwd``, without the caller's KEVIN_* settings."""
    clean = {k: v for k, v in os.environ.items() if k not in ("KEVIN_POLICY", "KEVIN_SANDBOX", "KEVIN_CLUSTER")}
    return subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=300)


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- the types ---------------------------------------------------------------------------------

def test_each_mode_parses_exactly_its_values():
    assert [parse_policy(v) for v in ("strict", "partial")] == ["strict", "partial"]
    assert [parse_sandbox_mode(v) for v in ("auto", "required", "off")] == ["auto", "required", "off"]
    for bad in ("Strict", " strict", "", None, 1, "lenient", "auto"):
        with pytest.raises(ValueError, match=r"^expected one of strict, partial$"):
            parse_policy(bad)
    for bad in ("Off", "none", "strict", None, True):
        with pytest.raises(ValueError, match=r"^expected one of auto, required, off$"):
            parse_sandbox_mode(bad)


def test_the_tuples_are_the_literal_types():
    assert POLICIES == get_args(Policy) == ("strict", "partial")
    assert SANDBOX_MODES == get_args(SandboxMode) == ("auto", "required", "off")


def test_the_sandbox_package_spells_the_same_modes():
    """sandbox.enforce's Mode and MODES are this module's, not a copy."""
    from kevin_agent.evaluate.sandbox import enforce

    assert get_args(enforce.Mode) == SANDBOX_MODES and enforce.MODES is SANDBOX_MODES


def test_every_policy_table_covers_every_policy_and_nothing_else():
    from kevin_agent import prompts
    from kevin_agent.evaluate.provenance import policy

    for table in (policy.POLICY_RULES, policy.POLICY_PROMPTS, prompts._CHOICE, prompts._TORCH_NN_RULE):
        assert set(table) == set(POLICIES)


def test_no_module_but_eval_modes_spells_a_policy_name():
    """The names live in one place; every other module takes the constants (or the typed value)."""
    spelled = []
    for folder in ("kevin_agent", "lsp", "tui"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "eval_modes.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in POLICIES:
                    spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert spelled == []


@pytest.mark.parametrize(("field", "value", "message"), [
    ("policy", "lenient", f"policy 'lenient': {POLICY_ERROR[1:-1]}"),
    ("policy", "STRICT", f"policy 'STRICT': {POLICY_ERROR[1:-1]}"),
    ("sandbox", "maybe", f"sandbox 'maybe': {SANDBOX_ERROR[1:-1]}"),
])
def test_no_eval_settings_hold_an_unknown_mode(field: str, value: str, message: str):
    with pytest.raises(ValueError) as err:
        EvalSettings(**{field: value})  # type: ignore[arg-type]  # the wrong value on purpose
    assert str(err.value) == message
    with pytest.raises(ValueError):
        dataclasses.replace(EvalSettings(), **{field: value})  # type: ignore[arg-type]


# -- entry points: one line, exit 2 ---------------------------------------------------------------

@pytest.mark.parametrize(("args", "line"), [
    (["eval", ADD_TASK, ADD_CANDIDATE, "--compile-only", "--policy", "lenient"],
     f"kevin eval: bad value for 'policy' in option --policy: 'lenient' {POLICY_ERROR}"),
    (["optimize", ADD_TASK, "--sandbox", "maybe"],
     f"kevin optimize: bad value for 'sandbox' in option --sandbox: 'maybe' {SANDBOX_ERROR}"),
    (["prompt", ADD_TASK, "--policy", "Partial"],
     f"kevin prompt: bad value for 'policy' in option --policy: 'Partial' {POLICY_ERROR}"),
])
def test_a_bad_flag_is_one_line_and_exit_2(tmp_path: Path, args: list[str], line: str):
    proc = kevin(tmp_path, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line(proc) == line


def test_a_bad_flag_is_an_error_even_when_the_static_checks_reject_first(tmp_path: Path):
    """`kevin eval` resolves its settings before judging: a static rejection does not hide a bad flag."""
    hack = tmp_path / "hack.py"
    hack.write_text("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                    "        return a + b\n")
    proc = kevin(tmp_path, "eval", ADD_TASK, str(hack), "--compile-only", "--sandbox", "none")
    assert proc.returncode == 2
    assert one_line(proc) == f"kevin eval: bad value for 'sandbox' in option --sandbox: 'none' {SANDBOX_ERROR}"


def test_a_bad_config_value_names_the_file_with_exit_2(tmp_path: Path):
    (tmp_path / "kevin.toml").write_text('policy = "loose"\n')
    proc = kevin(tmp_path, "optimize", ADD_TASK)
    assert proc.returncode == 2
    assert one_line(proc) == (f"kevin optimize: bad value for 'policy' in {tmp_path / 'kevin.toml'}: 'loose' "
                              f"{POLICY_ERROR}")


def test_a_bad_environment_value_names_the_variable_with_exit_2(tmp_path: Path):
    proc = kevin(tmp_path, "eval", ADD_TASK, ADD_CANDIDATE, "--compile-only", env={"KEVIN_SANDBOX": "never"})
    assert proc.returncode == 2
    assert one_line(proc) == ("kevin eval: bad value for 'sandbox' in environment variable KEVIN_SANDBOX: "
                              f"'never' {SANDBOX_ERROR}")


def test_a_flag_does_not_excuse_a_bad_config_value(tmp_path: Path):
    """The file is wrong whatever the flag says: it is named, not skipped."""
    (tmp_path / "kevin.toml").write_text('sandbox = "sometimes"\n')
    with pytest.raises(UserInputError, match="bad value for 'sandbox' in .*kevin.toml: 'sometimes'"):
        config_module.resolve_eval_settings({"sandbox": "off"}, {}, config_module.load_config(tmp_path))


def test_the_editor_names_a_bad_setting_and_keeps_its_default():
    """The language server never stops for a setting (docs/lsp.md): the message names the value and
    the allowed ones; the run then resolves as if it were unset, never as a silent strict."""
    from kevin_agent.lsp.settings import parse_settings, problems_message

    settings, problems = parse_settings({"kevin": {"policy": "lenient", "sandbox": "off"}})
    assert settings.policy is None and settings.sandbox == "off"
    assert problems_message(problems) == ("Kevin: ignoring bad settings, using defaults: kevin.policy = 'lenient' "
                                          "(expected one of strict, partial)")
    assert parse_settings({"kevin": {"policy": " partial "}})[0].policy == "partial"


# -- a run: read once, the typed value into the worker's job, a stored run re-parsed ----------------

def _request(project: Path, tmp_path: Path, **overrides: Any) -> RunRequest:
    script = write_script(tmp_path / "script.json", {(0, 0): "quick"})
    values: dict[str, Any] = dict(target=str(project / "add.py"), trajectories=1, turns=1, config_dir=project,
                                  backend_flags={"backend": "scripted", "script": str(script)},
                                  evaluator=f"replay:{write_replay(tmp_path / 'replay.json')}", gpu_name="H100")
    values.update(overrides)
    return RunRequest(**values)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "add.py").write_text(TASK_FILE.read_text())
    (folder / "kevin.toml").write_text('policy = "partial"\nsandbox = "off"\nmodel = "m"\n')
    return folder


@pytest.fixture()
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every config file read from disk (a wrapper around the real reader)."""
    seen: list[Path] = []
    real = config_module._load_toml

    def counting(path: Path) -> dict[str, Any]:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(config_module, "_load_toml", counting)
    return seen


def test_opening_a_run_reads_the_config_file_once(project: Path, tmp_path: Path, reads: list[Path]):
    request = _request(project, tmp_path)
    with RunService(environ={}) as service:
        prepared = service.open(request)
        assert prepared.settings.eval.policy == "partial" and prepared.settings.backend.model == "m"
        assert reads == [project / "kevin.toml"]  # backend and evaluation settings from one read
        cancel = threading.Event()
        cancel.set()
        prepared.play(cancel)
        reads.clear()
        resumed = service.open(RunRequest(resume=prepared.run_id, config_dir=project))
        assert reads == [project / "kevin.toml"] and resumed.settings.eval.policy == "partial"
        resumed.play(cancel)


def test_the_resolved_modes_reach_the_worker_job_unchanged(project: Path, tmp_path: Path):
    """config file (partial) < environment (sandbox required) < flag (policy strict): the evaluator
    gets those typed values, and the worker reads them back from its job file as they were."""
    from kevin_agent.evaluate.evaluator import CudaEvaluator

    given: list[EvalSettings] = []

    def make_evaluator(spec: Any, settings: EvalSettings) -> Any:
        from kevin_agent.evaluate.replay import ReplayEvaluator

        given.append(settings)
        return ReplayEvaluator(spec.removeprefix("replay:"))

    with RunService(environ={"KEVIN_SANDBOX": "required"}, make_evaluator=make_evaluator) as service:
        service.open(_request(project, tmp_path, eval_flags={"policy": "strict"}))
    assert (given[0].policy, given[0].sandbox) == ("strict", "required")
    evaluator = CudaEvaluator(given[0])
    job = WorkerJob("task", "candidate", tmp_path / "reply.json", evaluator._job_settings())
    path = tmp_path / "job.json"
    path.write_text(job.to_json())
    assert json.loads(path.read_text())["settings"]["policy"] == "strict"
    read = WorkerJob.read(path).settings
    assert (read.policy, read.sandbox) == ("strict", "required") and read == job.settings


def test_a_job_with_an_unknown_policy_is_a_bad_job(tmp_path: Path):
    path = tmp_path / "job.json"
    raw = json.loads(WorkerJob("task", "candidate", tmp_path / "reply.json").to_json())
    raw["settings"]["policy"] = "lenient"
    path.write_text(json.dumps(raw))
    with pytest.raises(BadJob) as err:
        WorkerJob.read(path)
    assert str(err.value) == f"job {path} has bad settings: policy 'lenient': expected one of strict, partial"


def test_a_stored_run_with_an_unknown_policy_is_one_line_when_resumed(project: Path, tmp_path: Path):
    """A hand-edited store is parsed like any other source: one line, exit 2, never a silent strict."""
    with RunService(environ={}) as service:
        prepared = service.open(_request(project, tmp_path))
        cancel = threading.Event()
        cancel.set()
        prepared.play(cancel)
        database = service.store_for(project).path
    with sqlite3.connect(database) as db:
        (raw,) = db.execute("SELECT settings_json FROM runs WHERE run_id = ?", (prepared.run_id,)).fetchone()
        settings = json.loads(raw)
        settings["eval"]["policy"] = "lenient"
        db.execute("UPDATE runs SET settings_json = ? WHERE run_id = ?", (json.dumps(settings), prepared.run_id))
    proc = kevin(project, "optimize", "--resume", prepared.run_id)
    assert proc.returncode == 2
    assert one_line(proc) == ("kevin optimize: the run's stored evaluation settings: policy 'lenient': "
                              "expected one of strict, partial")


def test_the_bench_report_names_the_policy_its_runs_were_judged_under(tmp_path: Path):
    """No --policy, `policy = "partial"` in kevin.toml: the runs judged under partial, and so says
    the report (it once said strict whenever the flag was not given)."""
    from loop_fixtures import reply

    repo = tmp_path / "repo"
    (repo / "kb" / "level1").mkdir(parents=True)
    (repo / "kb" / "level1" / "1_Add.py").write_text(TASK_FILE.read_text())
    (repo / "kevin.toml").write_text('policy = "partial"\n')
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    replies = repo / "replies.jsonl"
    replies.write_text(json.dumps({"task": "kb/level1/1_Add.py", "reply": reply("quick")}) + "\n")
    replay = write_replay(tmp_path / "replay.json")
    done = kevin(repo, "bench", "--replies", str(replies), "--evaluator", f"replay:{replay}", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["policy"] == "partial" and [t["policy"] for t in result["tasks"]] == ["partial"]


def test_a_candidate_that_rebinds_the_modes_in_the_worker_is_caught(monkeypatch: pytest.MonkeyPatch):
    """The worker's guards watch eval_modes like the rest of the judge: widening POLICIES or swapping
    a parser after the capture is named as patched."""
    from kevin_agent import eval_modes
    from kevin_agent.evaluate.worker import guards

    captured = guards.capture_references()
    assert guards.find_patched(captured) == []
    monkeypatch.setattr(eval_modes, "POLICIES", (*POLICIES, "lenient"))
    monkeypatch.setattr(eval_modes, "parse_policy", lambda value: value)
    assert set(guards.find_patched(captured)) >= {"kevin_agent.eval_modes.POLICIES",
                                                   "kevin_agent.eval_modes.parse_policy"}
