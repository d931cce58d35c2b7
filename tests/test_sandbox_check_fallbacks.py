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


@pytest.mark.parametrize("value", ["   ", "\t"])
def test_a_blank_cc_or_cxx_is_ignored(monkeypatch, value):
    monkeypatch.setenv("CC", value)
    monkeypatch.setenv("CXX", value)
    policy_module.toolchain_paths()  # no IndexError


def test_a_cuda_home_of_slash_is_never_granted(monkeypatch):
    real_isfile = os.path.isfile
    monkeypatch.setattr(policy_module.os.path, "isfile",
                        lambda path: path == "/include/cuda.h" or real_isfile(path))
    monkeypatch.setenv("CUDA_HOME", "/")
    assert "/" not in policy_module.cuda_homes()
