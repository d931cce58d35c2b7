"""``kevin eval`` end to end in a real subprocess: exit codes, one-line errors, JSON shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
ADD_TASK = str(KERNELS / "add_task.py")
ADD_CANDIDATE = str(KERNELS / "add_candidate.py")


def kevin(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "kevin_agent", "eval", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return lines[0]


def test_missing_candidate_is_exit_2(tmp_path: Path) -> None:
    proc = kevin(ADD_TASK, str(tmp_path / "missing.py"))
    assert proc.returncode == 2
    assert "candidate file not found" in one_line_error(proc)


def test_candidate_directory_is_exit_2(tmp_path: Path) -> None:
    proc = kevin(ADD_TASK, str(tmp_path))
    assert proc.returncode == 2
    assert "directory" in one_line_error(proc)


def test_bad_task_spec_is_exit_2(tmp_path: Path) -> None:
    proc = kevin(str(tmp_path / "nowhere.py") + "::Model", ADD_CANDIDATE)
    assert proc.returncode == 2
    assert "nowhere.py" in one_line_error(proc)


def test_task_class_missing_is_exit_2() -> None:
    proc = kevin(ADD_TASK + "::NoSuchClass", ADD_CANDIDATE)
    assert proc.returncode == 2
    assert "NoSuchClass" in one_line_error(proc)


def test_bad_arch_is_exit_2() -> None:
    proc = kevin(ADD_TASK, ADD_CANDIDATE, "--compile-only", "--arch", "sm_90")
    assert proc.returncode == 2
    assert "--arch" in one_line_error(proc)


def _no_device_here() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.fail("this test needs a machine without a CUDA device; run it on CI, not the GPU host")


HACK = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, a, b):\n        return a + b\n")
NEEDS_GPU = "kevin eval: the GPU stage (correctness, timing) needs an NVIDIA GPU"


@pytest.mark.nogpu
def test_no_device_still_runs_the_static_checks_and_says_what_is_wrong(tmp_path: Path) -> None:
    _no_device_here()
    hack = tmp_path / "hack.py"
    hack.write_text(HACK)
    proc = kevin(ADD_TASK, str(hack))
    assert proc.returncode == 0, proc.stderr  # judged: the answer is wrong, whatever the machine
    assert proc.stdout.startswith("stage: static (FAILED)") and proc.stderr == ""


@pytest.mark.nogpu
@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # shares the build of the tests around it (one cache)
def test_no_device_without_an_arch_compiles_for_9_0_says_so_once_then_exit_3(shared_build_cache: Path) -> None:
    _no_device_here()
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", ADD_TASK, ADD_CANDIDATE, "--cache",
                           str(shared_build_cache)], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.startswith("stage: compile (passed)")
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == ("kevin eval: no GPU here, so this compiled for CUDA architecture 9.0 (H100/H200); "
                        "--arch or TORCH_CUDA_ARCH_LIST picks another") and lines[1].startswith(NEEDS_GPU)
    assert len(lines) == 2


@pytest.mark.nogpu
@pytest.mark.nvcc
@pytest.mark.timeout(1800)
def test_no_device_compiles_prints_the_verdict_then_exit_3(shared_build_cache: Path) -> None:
    _no_device_here()
    proc = kevin(ADD_TASK, ADD_CANDIDATE, "--arch", "9.0", "--cache", str(shared_build_cache))
    assert proc.returncode == 3
    assert proc.stdout.startswith("stage: compile (passed)")
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(NEEDS_GPU)
    assert "No CUDA runtime is found" not in proc.stderr


@pytest.mark.nogpu
@pytest.mark.nvcc
@pytest.mark.timeout(1800)
def test_no_device_compile_error_is_a_verdict_exit_0(tmp_path: Path, shared_build_cache: Path) -> None:
    _no_device_here()
    broken = tmp_path / "broken.py"
    broken.write_text(Path(ADD_CANDIDATE).read_text().replace("out[idx] = a[idx] + b[idx];",
                                                              "out[idx] = a[idx] + c[idx];"))
    proc = kevin(ADD_TASK, str(broken), "--json", "--cache", str(shared_build_cache))
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["stage"] == "compile" and verdict["ok"] is False
    assert '"c" is undefined' in verdict["details"]["build"]["compiler_errors"] and NEEDS_GPU not in proc.stderr


def test_missing_nvcc_is_exit_3(tmp_path: Path) -> None:
    # the CLI in a child process with no nvcc on CUDA_HOME, PATH or the default toolkit folder
    code = ("import sys, pathlib, kevin_agent.evaluate.build.flags as b; "
            f"b.DEFAULT_CUDA_HOME = pathlib.Path({str(tmp_path)!r}); "
            "from kevin_agent.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = os.path.dirname(sys.executable)
    proc = subprocess.run([sys.executable, "-c", code, "eval", ADD_TASK, ADD_CANDIDATE, "--compile-only"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 3
    assert "nvcc not found" in one_line_error(proc)


def test_cuda_home_that_is_no_toolkit_is_exit_3(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", ADD_TASK, ADD_CANDIDATE, "--compile-only"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 3
    assert f"CUDA_HOME={tmp_path} is not a CUDA toolkit" in one_line_error(proc)


def test_static_rejection_prints_json_and_exits_0(tmp_path: Path) -> None:
    hack = tmp_path / "hack.py"
    hack.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, a, b):\n        return a + b\n")
    proc = kevin(ADD_TASK, str(hack), "--compile-only", "--json")
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["stage"] == "static" and verdict["ok"] is False and verdict["correct"] is False
    assert verdict["message"].startswith("Your answer was rejected by the static checks")
    assert verdict["details"]["static_rule"]


def test_readable_output_names_stage_and_rule(tmp_path: Path) -> None:
    hack = tmp_path / "hack.py"
    hack.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, a, b):\n        return a + b\n")
    proc = kevin(ADD_TASK, str(hack), "--compile-only")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("stage: static (FAILED)")
    assert "static rule:" in proc.stdout


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold compile on a busy 2-core CI machine
def test_compile_only_json_shape(shared_build_cache: Path) -> None:
    proc = kevin(ADD_TASK, ADD_CANDIDATE, "--compile-only", "--json", "--arch", "9.0",
                 "--cache", str(shared_build_cache))
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert set(verdict) >= {"stage", "ok", "correct", "message", "details"}
    assert verdict["stage"] == "compile" and verdict["ok"] is True and verdict["correct"] is False
    assert verdict["message"] == "Your answer compiled; it was not run."
    assert set(verdict["details"]) >= {"build", "correctness", "provenance", "timing", "trust", "environment"}
    build = verdict["details"]["build"]  # one object per stage (docs/eval.md)
    assert build["seconds"] is not None and build["seconds"] >= 0
    assert isinstance(build["cache_hit"], bool)
    assert build["path"] in ("split", "whole")


def test_eval_modules_import_without_heavy_packages() -> None:
    code = (
        "import sys\n"
        "import kevin_agent.cli, kevin_agent.commands.eval_cmd\n"
        "import kevin_agent.evaluate.evaluator, kevin_agent.evaluate.isolation\n"
        "import kevin_agent.evaluate.environment, kevin_agent.evaluate.replay\n"
        "heavy = [m for m in ('torch', 'numpy', 'rich', 'git', 'openai', 'pygls', 'textual') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_compiling_without_gpu_defaults_the_arch_to_9_0_unless_told() -> None:
    from kevin_agent.commands.eval_cmd import default_arch

    assert default_arch(None, True, {}) == "9.0"
    assert default_arch("8.6", True, {}) == "8.6"
    assert default_arch(None, True, {"TORCH_CUDA_ARCH_LIST": "8.0"}) is None  # the variable decides
    assert default_arch(None, False, {}) is None  # a GPU here: its own architecture


@pytest.mark.nogpu
@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold compile on a busy 2-core CI machine; shares the build above
def test_compile_only_without_gpu_or_arch_compiles_for_9_0_and_says_so_once(shared_build_cache: Path) -> None:
    _no_device_here()
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", ADD_TASK, ADD_CANDIDATE, "--compile-only",
                           "--json", "--cache", str(shared_build_cache)],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stage"] == "compile"
    assert proc.stderr.strip().splitlines() == [
        "kevin eval: no GPU here, so this compiled for CUDA architecture 9.0 (H100/H200); --arch or "
        "TORCH_CUDA_ARCH_LIST picks another"]


def test_optimize_without_gpu_names_commands_that_work_without_one() -> None:
    import shlex

    from kevin_agent.cli import build_parser
    from kevin_agent.evaluate.environment import NO_DEVICE

    commands = [c for c in NO_DEVICE.split("`")[1::2] if c.startswith("kevin ")]
    assert commands == ["kevin eval FILE.py::Class CANDIDATE.py --compile-only"]
    args = build_parser().parse_args(shlex.split(commands[0])[1:])
    assert args.compile_only and args.arch is None  # works as written: no --arch needed
    assert "--cluster ray://HEAD:10001" in NO_DEVICE and "--evaluator replay:FILE" in NO_DEVICE
