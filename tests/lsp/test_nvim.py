"""Headless Neovim (0.7+) as the client: editors/nvim starts the server, a Lua script drives the
optimize -> question -> accept flow, the commit lands in a temporary repository."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from lsp_support import ROOT, git, write_fixtures

from kevin_agent.store import RunStore

NVIM = shutil.which("nvim")
HERE = ROOT / "tests" / "lsp" / "nvim"

pytestmark = [
    pytest.mark.timeout(900),  # a guard: nvim drives a run in ~20 s
    pytest.mark.skipif(NVIM is None, reason="Neovim is not installed (scripts/test.sh installs it)"),
]


def test_neovim_drives_optimize_and_accept(tmp_path, repo):
    env, script = write_fixtures(tmp_path, {(0, 0): "slow", (1, 0): "quick", (0, 1): "fastest",
                                            (1, 1): "wrong"})
    out = tmp_path / "nvim-out.txt"
    env.update(KEVIN_NVIM_DIR=str(ROOT / "editors" / "nvim"), KEVIN_TEST_PYTHON=sys.executable,
               KEVIN_TEST_SCRIPT=script, KEVIN_TEST_ANSWER="Accept & commit",
               KEVIN_TEST_FILE=str(repo / "model.py"), KEVIN_TEST_OUT=str(out),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"))
    done = subprocess.run([str(NVIM), "--headless", "-n", "-u", str(HERE / "init.lua"),
                           "-c", f"luafile {HERE / 'drive.lua'}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=800)
    seen = out.read_text().splitlines() if out.exists() else []
    assert done.returncode == 0, (seen, done.stdout[-2000:], done.stderr[-2000:])

    lenses = [line for line in seen if line.startswith("LENS")]
    assert "LENS 4 Kevin: write CUDA kernel" in lenses and len(lenses) == 2
    assert any(line.startswith("OPTIMIZE") and "Model" in line for line in seen)

    message = git(repo, "log", "-1", "--format=%B")
    assert "Model" in message and "3.00x" in message
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert any(p.endswith(".cu") for p in committed) and "model.py" not in committed
    for name in committed:  # the committed files are the ones on disk, none left empty
        assert (repo / name).read_text().strip()
    assert "b + a" in RunStore.for_path(repo).load_run("latest").task.source


def test_default_cmd_finds_the_projects_venv_when_kevin_is_not_on_path(tmp_path, repo):
    """`kevin lsp` is the default cmd; Neovim started without the venv activated still finds
    <project>/.venv/bin/kevin (here a stand-in running this Python's kevin_agent)."""
    import os

    venv_kevin = repo / ".venv" / "bin" / "kevin"
    venv_kevin.parent.mkdir(parents=True)
    venv_kevin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kevin_agent "$@"\n')
    venv_kevin.chmod(0o755)
    out = tmp_path / "nvim-out.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_")}
    env.update(PATH="/usr/bin:/bin", KEVIN_NVIM_DIR=str(ROOT / "editors" / "nvim"),
               KEVIN_TEST_FILE=str(repo / "model.py"), KEVIN_TEST_OUT=str(out),
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"))
    assert NVIM is not None
    done = subprocess.run([NVIM, "--headless", "-n", "-u", str(HERE / "venv.lua")],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=800)
    seen = out.read_text().splitlines() if out.exists() else []
    assert done.returncode == 0, (seen, done.stdout[-2000:], done.stderr[-2000:])
    assert "ON_PATH 0" in seen  # no `kevin` on PATH: the venv is not activated
    assert f"CMD {venv_kevin} lsp" in seen and "INITIALIZED true" in seen
    no_venv = next(line for line in seen if line.startswith("NO_VENV"))
    assert no_venv.startswith("NO_VENV nil kevin: no `kevin` on PATH nor in /no/such/project/.venv/bin")
