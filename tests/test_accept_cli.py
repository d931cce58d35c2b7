"""``kevin diff``, ``kevin accept`` and ``kevin undo`` on a real run store in a temporary repository."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from accept_support import MODULE, committed_paths, fixture_candidate, make_record, make_repo

from kevin_agent import cli
from kevin_agent.store import RunStore

OUR_FILES = {"models/fused_block_kernel.cu", "models/fused_block_kernel.cpp", "models/fused_block_cuda.py",
             "models/test_fused_block_cuda.py"}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    record = make_record(tmp_path / MODULE, fixture_candidate("gelu"))
    store = RunStore.for_path(tmp_path)
    store.create_run(record.run_id, record.task, record.settings)
    for candidate, verdict in record.candidates:
        store.add_candidate(record.run_id, candidate, [])
        assert verdict is not None
        store.add_verdict(record.run_id, candidate.id, verdict)
    store.set_status(record.run_id, "done")
    store.close()
    monkeypatch.chdir(tmp_path)
    return repo


def _ours_absent(root: Path) -> bool:
    return not any((root / name).exists() for name in OUR_FILES)


def test_diff_prints_what_accept_would_write(repo, capsys):
    root = Path(repo.working_tree_dir)
    assert cli.main(["diff", "latest"]) == 0
    out = capsys.readouterr().out
    assert "--- /dev/null\n+++ b/models/fused_block_cuda.py\n" in out
    assert "+class FusedBlockCUDA(nn.Module):\n" in out
    assert "+__global__ void gelu_kernel" in out
    assert "\x1b[" not in out  # not a terminal: no colour
    assert _ours_absent(root)


def test_accept_without_a_terminal_or_flag_writes_nothing(repo, capsys):
    root = Path(repo.working_tree_dir)
    assert cli.main(["accept", "latest"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("kevin accept: nothing written: pass --commit to write and commit the kernel "
                           "files, or --no-commit to only write them")
    assert _ours_absent(root) and repo.head.commit.message == "initial"


def test_accept_commit_then_undo(repo, capsys):
    root = Path(repo.working_tree_dir)
    assert cli.main(["accept", "r20261202-1", "t1.3", "--commit"]) == 0
    out = capsys.readouterr().out
    assert "wrote models/fused_block_kernel.cu" in out
    assert f"committed {repo.head.commit.hexsha[:10]}: kevin: CUDA kernel for FusedBlock" in out
    assert committed_paths(repo) == OUR_FILES
    assert cli.main(["undo"]) == 0
    assert capsys.readouterr().out.startswith(f"{repo.head.commit.hexsha[:10]} Revert \"kevin: CUDA kernel")
    assert _ours_absent(root)
    assert cli.main(["undo"]) == 2
    assert "no kevin-agent commit to undo" in capsys.readouterr().err


def test_accept_errors_are_one_line(repo, capsys):
    assert cli.main(["accept", "latest", "t9.9", "--commit"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "has no candidate 't9.9'" in err
    assert cli.main(["accept", "latest", "--no-commit", "--branch", "x"]) == 2
    assert "--branch needs a commit" in capsys.readouterr().err
    assert _ours_absent(Path(repo.working_tree_dir))


def _run_in_terminal(root: Path, answer: str) -> str:
    """`kevin accept latest` on a pseudo-terminal, answering the question with ``answer``."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "TERM": "dumb"}
    process = subprocess.Popen([sys.executable, "-m", "kevin_agent", "accept", "latest"], cwd=root,
                               stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    output, answered, deadline = b"", False, time.monotonic() + 600  # a guard: it answers in seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"[y/N]" in output:
                os.write(controller, answer.encode() + b"\n")
                answered = True
        elif process.poll() is not None:
            break
    process.wait(timeout=300)
    os.close(controller)
    assert process.returncode == 0, output.decode(errors="replace")
    return output.decode(errors="replace")


def test_interactive_accept_asks_and_respects_no(repo):
    root = Path(repo.working_tree_dir)
    out = _run_in_terminal(root, "n")
    assert "Write these files and commit them? [y/N]" in out
    assert "\x1b[32m+class FusedBlockCUDA(nn.Module):" in out  # coloured diff on a terminal
    assert "nothing written" in out
    assert _ours_absent(root) and repo.head.commit.message == "initial"


def test_interactive_accept_yes_commits(repo):
    out = _run_in_terminal(Path(repo.working_tree_dir), "y")
    assert "committed" in out
    assert committed_paths(repo) == OUR_FILES
