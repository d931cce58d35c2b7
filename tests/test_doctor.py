"""``kevin doctor`` on this machine: environment lines, the model server, the sandbox self-check
(all blocked, said once), and what can run here with an exit code that says whether the main job can."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

from fake_vllm_server import fake_server  # noqa: F401  (pytest fixture)

from kevin_agent.commands.doctor_cmd import Findings, probe_model_server, verdict_lines


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def doctor(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "kevin_agent", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=900)


def _gpu_here() -> bool:
    import torch

    return torch.cuda.is_available()


def test_doctor_reports_the_host_and_every_attack_is_blocked():
    url = _closed_url()
    done = doctor("--base-url", url)
    out = done.stdout
    assert out.startswith("torch: ") and "\nnvcc: " in out and "\nGPUs: " in out
    assert [line for line in out.splitlines() if line.startswith("sandbox: ")] == [
        next(line for line in out.splitlines() if line.startswith("sandbox: landlock abi"))]  # said once
    for attack in ("read a file in the user's home", "open a TCP connection", "spawn a shell",
                   "raise its RLIMIT_NOFILE", "write next to the task file", "list the repository"):
        line = next(row for row in out.splitlines() if attack in row)
        assert " blocked " in line, line
    assert "\nsandbox self-check: all checks passed\n" in out
    assert f"\nmodel server: cannot reach {url} (" in out and "--base-url / KEVIN_BASE_URL" in out
    # no model server there: the main job cannot run, whatever else this machine has
    assert done.returncode == 3, out + done.stderr
    assert f"kevin optimize cannot run here: it needs {'' if _gpu_here() else 'a GPU, '}a model server at {url}." in out


def test_doctor_checks_the_configured_model_server(fake_server, tmp_path):  # noqa: F811
    server = fake_server([{"text": "unused"}])
    assert probe_model_server(server.url, "cognition-ai/Kevin-32B", None) is None
    assert probe_model_server(server.url, "other/model", None) == (
        f"{server.url} does not serve other/model (it serves cognition-ai/Kevin-32B; set --model / KEVIN_MODEL)")
    keyed = fake_server([{"text": "unused"}], api_key="secret")
    assert probe_model_server(keyed.url, "cognition-ai/Kevin-32B", "wrong") == (
        f"HTTP 401 from {keyed.url}/models; check KEVIN_API_KEY / OPENAI_API_KEY")
    done = doctor("--base-url", server.url)
    assert f"\nmodel server: {server.url} answers and serves cognition-ai/Kevin-32B\n" in done.stdout
    assert done.returncode == (0 if _gpu_here() else 3), done.stdout


def test_what_can_run_here_follows_what_is_missing():
    assert verdict_lines(Findings(compiles=True)) == ["kevin optimize can run here."]
    lines = verdict_lines(Findings(missing=["a GPU"], compiles=True))
    assert lines[0] == "kevin optimize cannot run here: it needs a GPU."
    assert "`kevin eval FILE.py::Class CANDIDATE.py --compile-only`" in lines[1]
    assert not any("--compile-only" in line for line in verdict_lines(Findings(missing=["nvcc"])))


def test_version_and_help_name_exit_codes_and_key_variables(capsys):
    import pytest

    from kevin_agent.cli import build_parser, main

    with pytest.raises(SystemExit) as version:
        main(["--version"])
    assert version.value.code == 0 and capsys.readouterr().out == "kevin-agent 0.1.0\n"
    parser = build_parser()
    subs: Any = next(a for a in parser._actions if a.choices and "optimize" in a.choices).choices
    optimize = subs["optimize"].format_help()
    for text in ("1 run failed", "2 bad input", "3 environment", "130 cancelled", "KEVIN_API_KEY",
                 "OPENAI_API_KEY", "KEVIN_BASE_URL", "KEVIN_MODEL"):
        assert text in " ".join(optimize.split()), text
    for name, sub in subs.items():  # every command names its exit codes
        assert "exit codes: 0 " in " ".join(sub.format_help().split()), name
    assert "KEVIN_API_KEY" in subs["doctor"].format_help() and "KEVIN_BASE_URL" in subs["doctor"].format_help()
