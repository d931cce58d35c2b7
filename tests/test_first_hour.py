"""What a newcomer reads in the first hour: every flag has help, metavars agree between commands,
messages say each thing once and name the flag to use, counts have the right plural."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.cli import build_parser
from kevin_agent.data import Candidate, Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.static.checks import check_candidate, format_violations
from kevin_agent.evaluate.verdicts import static_verdict
from kevin_agent.verdict_records import TimingRecord

KERNELS = Path(__file__).parent / "fixtures" / "kernels"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_flag_and_argument_of_every_command_has_help():
    missing = [f"kevin {name} {'/'.join(act.option_strings) or act.dest}"
               for name, sub in _subcommands().items() for act in sub._actions
               if not isinstance(act, argparse._HelpAction) and not (act.help or "").strip()]
    assert missing == []


def test_positional_arguments_are_upper_case_and_agree_between_commands():
    metavars = {name: [act.metavar for act in sub._actions if not act.option_strings]
                for name, sub in _subcommands().items()}
    for name, names in metavars.items():
        words = [str(m).partition("::")[0].partition(".")[0] for m in names if m]  # FILE.py::Class: FILE
        assert len(words) == len(names) and all(w == w.upper() for w in words), (name, names)
    for name in ("show", "diff", "accept"):
        assert metavars[name] == ["RUN", "CANDIDATE"]
    for name in ("diff", "accept"):
        usage = _subcommands()[name].format_usage()
        assert "RUN [CANDIDATE]" in usage and "run [candidate]" not in usage


def test_syntax_error_names_the_line_once():
    violations = check_candidate("import torch\nclass ModelNew(:\n")
    text = format_violations(violations)
    assert text.startswith("line 2: Python syntax error: ") and text.count("line 2") == 1
    assert "at line" not in text


def test_several_static_problems_follow_the_sentence_without_a_dangling_line():
    code = ("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
            "    def forward(self, x):\n        import subprocess\n        return torch.relu(x)\n")
    verdict = static_verdict(code)
    assert verdict is not None
    first, *rest = verdict.message.splitlines()
    assert first.startswith("Your answer was rejected by the static checks before compiling: ")
    assert first.endswith(f"{len(rest)} problems.") and len(rest) > 1
    assert not any(line != line.rstrip() for line in verdict.message.splitlines())
    one = getattr(static_verdict("import torch\nclass ModelNew(:\n"), "message", "")
    assert "\n" not in one and "before compiling: line 2: Python syntax error" in one


def test_compiling_without_a_device_names_the_arch_flag(monkeypatch):
    from kevin_agent.errors import EnvironmentProblem
    from kevin_agent.evaluate.build.flags import resolve_arch

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA device gives the architecture")
    except ImportError:
        pass
    with pytest.raises(EnvironmentProblem) as caught:
        resolve_arch(None)
    assert "--arch 9.0" in str(caught.value) and "TORCH_CUDA_ARCH_LIST" in str(caught.value)


def test_counts_have_the_right_plural():
    from kevin_agent.accept.message import commit_message
    from kevin_agent.commands.show_cmd import _shape

    verdict = Verdict(Stage.TIMING, True, "ok", VerdictDetails(timing=TimingRecord(speedup_vs_eager=2.0)))
    message = commit_message(class_name="A", source_label="a.py::A", run_id="r1",
                             candidate=Candidate(0, 0, id="t0.0"), verdict=verdict,
                             settings={"trajectories": 1, "turns": 1}, paths=["a_cuda.py"])
    assert "Run:" in message and "r1 (1 trajectory x 1 turn)" in message
    assert _shape({"trajectories": 1, "turns": 1}) == "1 trajectory x 1 turn"
    assert _shape({"trajectories": 2, "turns": 4}) == "2 trajectories x 4 turns"


def test_torch_no_cuda_runtime_warning_is_not_printed_by_kevin(tmp_path):
    """Importing torch.utils.cpp_extension without a GPU logs a warning; `kevin` filters it."""
    code = ("import sys\nfrom kevin_agent.cli import main\n"
            "code = main(['eval', sys.argv[1], sys.argv[2], '--compile-only', '--arch', '9.0'])\n"
            "import torch.utils.cpp_extension\n")  # as the build does in this process
    hack = tmp_path / "hack.py"
    hack.write_text("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, a, b):\n        return a + b\n")
    env = {**os.environ, "CUDA_HOME": os.environ.get("CUDA_HOME") or "/usr/local/cuda"}
    proc = subprocess.run([sys.executable, "-c", code, str(KERNELS / "add_task.py"), str(hack)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "No CUDA runtime is found" not in proc.stderr


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`kevin show RUN | head`: the reader leaves before the end; no traceback, exit 0."""
    task = tmp_path / "big.py"  # a prompt longer than a pipe's buffer
    source = (KERNELS / "add_task.py").read_text()
    task.write_text(source.replace('"""Elementwise addition of two tensors of the same shape."""',
                                   '"""' + "Elementwise addition.\n" * 20000 + '"""'))
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent", "prompt", str(task)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_readme_names_everything_the_test_command_installs():
    """README's set-up section lists what scripts/test.sh installs: each Debian package, the dev
    extra and the npm packages of the VS Code test."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = (root / "scripts" / "test.sh").read_text()
    setup = (root / "README.md").read_text().split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    debian = re.findall(r"need\+=\(([\w.+-]+)\)", script)
    assert debian and all(f"`{name}`" in setup for name in debian), debian
    npm = json.loads((root / "tests" / "vscode_e2e" / "package.json").read_text())["dependencies"]
    assert all(f"`{name}`" in setup for name in npm), npm
    assert "'.[dev]'" in script and "`dev` extra" in setup
