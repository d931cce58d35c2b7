"""Commit hooks: off by default (commit-tree runs none); with --run-hooks / [tool.kevin] run_hooks
the repository's pre-commit and commit-msg hooks run, a failing hook refuses the commit with its
output and nothing is written. Real temporary git repositories and real hook scripts."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import git
import pytest
from accept_support import MODULE, fixture_candidate, make_record, make_repo

from kevin_agent.accept import accept, plan_accept, undo_last
from kevin_agent.errors import UserInputError
from kevin_agent.store import RunStore

OUR_FILES = {"models/fused_block_kernel.cu", "models/fused_block_kernel.cpp", "models/fused_block_cuda.py",
             "models/test_fused_block_cuda.py"}


def hook(root: Path, name: str, body: str, folder: str = ".git/hooks") -> Path:
    path = root / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _plan(root: Path):
    return plan_accept(make_record(root / MODULE, fixture_candidate("gelu")))


FAILING = 'echo "lint: fused_block_kernel.cu: trailing whitespace" >&2\nexit 1\n'


def test_hooks_do_not_run_by_default(tmp_path):
    repo = make_repo(tmp_path)
    hook(tmp_path, "pre-commit", FAILING)
    result = accept(_plan(tmp_path))
    assert result.sha == repo.head.commit.hexsha  # the failing hook never ran


def test_a_failing_pre_commit_hook_refuses_the_commit_with_its_output(tmp_path):
    repo = make_repo(tmp_path)
    before = repo.head.commit.hexsha
    (tmp_path / "README.md").write_text("project\nstaged\n")
    repo.index.add(["README.md"])
    hook(tmp_path, "pre-commit", FAILING)
    with pytest.raises(UserInputError) as refused:
        accept(_plan(tmp_path), run_hooks=True)
    message = str(refused.value)
    assert message.startswith("the repository's pre-commit hook failed (exit 1):")
    assert "lint: fused_block_kernel.cu: trailing whitespace" in message
    assert "nothing was committed or written" in message
    assert repo.head.commit.hexsha == before
    assert not any((tmp_path / name).exists() for name in OUR_FILES)
    assert [d.a_path for d in repo.index.diff("HEAD")] == ["README.md"]  # the user's staging stays


def test_passing_hooks_see_only_our_files_and_commit_msg_edits_are_kept(tmp_path):
    repo = make_repo(tmp_path)
    (tmp_path / "README.md").write_text("project\nstaged\n")
    repo.index.add(["README.md"])
    seen = tmp_path.parent / f"{tmp_path.name}-seen.txt"
    hook(tmp_path, "pre-commit", f'git diff --cached --name-only > "{seen}"\n')
    hook(tmp_path, "commit-msg", 'printf "\\nReviewed-by: Hook <hook@example.com>\\n" >> "$1"\n')
    result = accept(_plan(tmp_path), run_hooks=True)
    assert set(seen.read_text().split()) == OUR_FILES  # not the user's staged README
    message = repo.head.commit.message
    assert "Reviewed-by: Hook <hook@example.com>" in message and result.message == message
    assert message.startswith("kevin: CUDA kernel for FusedBlock")
    assert [d.a_path for d in repo.index.diff("HEAD")] == ["README.md"]


def test_run_hooks_config_key_turns_them_on_and_a_flag_beats_it(tmp_path):
    make_repo(tmp_path)
    (tmp_path / "kevin.toml").write_text("run_hooks = true\n")
    hook(tmp_path, "pre-commit", FAILING)
    with pytest.raises(UserInputError, match="pre-commit hook failed"):
        accept(_plan(tmp_path))
    assert accept(_plan(tmp_path), run_hooks=False).sha  # --no-run-hooks


def test_bad_run_hooks_value_is_one_line(tmp_path):
    make_repo(tmp_path)
    (tmp_path / "kevin.toml").write_text('run_hooks = "sometimes"\n')
    with pytest.raises(UserInputError, match="bad value for 'run_hooks'.*expected true or false"):
        accept(_plan(tmp_path))


def test_older_git_runs_the_hook_file_and_honours_core_hooks_path(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    monkeypatch.setattr(git.cmd.Git, "version_info", property(lambda self: (2, 30, 0)))
    with repo.config_writer() as config:
        config.set_value("core", "hooksPath", "ci/hooks")
    hook(tmp_path, "pre-commit", FAILING, folder="ci/hooks")
    with pytest.raises(UserInputError, match="trailing whitespace"):
        accept(_plan(tmp_path), run_hooks=True)
    (tmp_path / "ci" / "hooks" / "pre-commit").unlink()  # no hook at all: commits
    assert accept(_plan(tmp_path), run_hooks=True).sha == repo.head.commit.hexsha


def test_undo_with_hooks_refused_leaves_the_accepted_files(tmp_path):
    repo = make_repo(tmp_path)
    accepted = accept(_plan(tmp_path)).sha
    hook(tmp_path, "pre-commit", FAILING)
    with pytest.raises(UserInputError, match="nothing was reverted"):
        undo_last(tmp_path, run_hooks=True)
    assert repo.head.commit.hexsha == accepted and not repo.is_dirty(untracked_files=True)
    assert undo_last(tmp_path).startswith(repo.head.commit.hexsha[:7])  # default: no hooks


def test_kevin_accept_run_hooks_flag_on_the_command_line(tmp_path):
    make_repo(tmp_path)
    record = make_record(tmp_path / MODULE, fixture_candidate("gelu"))
    with RunStore.for_path(tmp_path) as store:
        store.create_run(record.run_id, record.task, record.settings)
        for candidate, verdict in record.candidates:
            store.add_candidate(record.run_id, candidate, [])
            assert verdict is not None
            store.add_verdict(record.run_id, candidate.id, verdict)
        store.set_status(record.run_id, "done")
    hook(tmp_path, "pre-commit", FAILING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    kevin = [sys.executable, "-m", "kevin_agent", "accept", "latest", "--commit"]
    refused = subprocess.run([*kevin, "--run-hooks"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("kevin accept: the repository's pre-commit hook failed (exit 1):")
    assert "trailing whitespace" in refused.stderr and refused.stdout == ""
    done = subprocess.run(kevin, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "committed" in done.stdout
