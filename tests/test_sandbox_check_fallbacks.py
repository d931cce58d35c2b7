"""The sandbox self-check and the policies on odd hosts: no home, a check child that hangs, fewer
than five basic device nodes, a blank $CC, a CUDA "home" of /."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.evaluate.sandbox import check
from kevin_agent.evaluate.sandbox import policy as policy_module

ROOT = Path(__file__).resolve().parents[1]


def test_the_secret_file_falls_back_to_the_checks_folder_without_a_home(tmp_path):
    path, created = check._home_file(Path("/nonexistent"), tmp_path)
    assert created and path.parent == tmp_path and path.is_file()


@pytest.mark.timeout(200)
def test_the_self_check_runs_with_home_nonexistent():
    env = {**os.environ, "HOME": "/nonexistent", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent.evaluate.sandbox"], capture_output=True, text=True,
                          timeout=180, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "read a file in the user's home" in ln)
    assert " blocked " in line, line


def test_a_check_child_that_times_out_is_a_failed_row(monkeypatch):
    def hang(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs.get("timeout") or 0)

    monkeypatch.setattr(check.subprocess, "run", hang)
    line, results = check.check_sandbox("auto", timeout_s=1.0)
    failed = [r for r in results if r.outcome == check.FAILED]
    assert any("did not finish within 1 s" in r.detail for r in failed), results
    assert not any(r.outcome == check.NOT_BLOCKED for r in results)  # not run is not "succeeded"
    assert not all(r.ok for r in results)


@pytest.mark.parametrize("basic, gpu_nodes, expect_gpu", [
    (["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"], ["/dev/nvidiactl"], True),  # no /dev/full
    (["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"], [], False),
])
def test_the_self_check_asks_for_gpu_devices_only_when_there_are_some(monkeypatch, basic, gpu_nodes, expect_gpu):
    class Stop(Exception):
        pass

    asked = []

    def fake_worker_policy(scratch, *args, gpu=True, **kwargs):
        asked.append(gpu)
        raise Stop

    monkeypatch.setattr(check, "device_paths", lambda gpu=True: basic + (gpu_nodes if gpu else []))
    monkeypatch.setattr(check, "worker_policy", fake_worker_policy)
    with pytest.raises(Stop):
        check.check_sandbox("auto")
    assert asked == [expect_gpu]


def fake_tool(folder: Path, name: str) -> Path:
    """An executable ``folder/name`` (what shutil.which finds on PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return tool


@pytest.mark.parametrize("value", ["   ", "\t"])
def test_a_blank_cc_or_cxx_is_ignored(monkeypatch, tmp_path, value):
    fake_tool(tmp_path / "opt" / "mycc" / "bin", "mycc")
    monkeypatch.setenv("PATH", f"{tmp_path / 'opt' / 'mycc' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    without = policy_module.toolchain_paths()
    monkeypatch.setenv("CC", "mycc -O2")  # a set $CC is read: its install tree is granted
    assert os.path.realpath(tmp_path / "opt" / "mycc") in policy_module.toolchain_paths()
    monkeypatch.setenv("CC", value)
    monkeypatch.setenv("CXX", value)
    assert policy_module.toolchain_paths() == without  # a blank one adds nothing (and raises nothing)


def test_a_toolchain_under_home_shrinks_to_its_binary_folder(monkeypatch, tmp_path):
    """A compiler in ~/.local/bin grants ~/.local/bin, never ~/.local (or the home); the same for a
    compiler inside a protected repository."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    fake_tool(home / ".local" / "bin", "homecc")
    fake_tool(repo / "tools" / "bin", "repocxx")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", os.pathsep.join([str(home / ".local" / "bin"), str(repo / "tools" / "bin"),
                                                os.environ.get("PATH", "")]))
    monkeypatch.setenv("CC", "homecc")
    monkeypatch.setenv("CXX", "repocxx")
    paths = policy_module.toolchain_paths(protect=[repo])
    assert os.path.realpath(home / ".local" / "bin") in paths
    assert os.path.realpath(repo / "tools" / "bin") in paths
    for wide in (home, home / ".local", repo, repo / "tools"):
        assert os.path.realpath(wide) not in paths, wide
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))  # not under a protected path: the whole tree
    (tmp_path / "elsewhere").mkdir()
    assert os.path.realpath(home / ".local") in policy_module.toolchain_paths(protect=[repo])


def test_a_cuda_home_of_slash_is_never_granted(monkeypatch):
    real_isfile = os.path.isfile
    monkeypatch.setattr(policy_module.os.path, "isfile",
                        lambda path: path == "/include/cuda.h" or real_isfile(path))
    monkeypatch.setenv("CUDA_HOME", "/")
    assert "/" not in policy_module.cuda_homes()
