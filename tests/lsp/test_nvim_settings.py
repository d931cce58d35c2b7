"""The Neovim plugin sends the endpoint as ``baseUrl`` (the CLI's ``--base-url``, the config's
``base_url``); the old ``endpoint`` is read as it, with a note to rename it (headless Neovim)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from lsp_support import ROOT

NVIM = shutil.which("nvim")
NOTE = ("kevin: rename the deprecated settings.endpoint -> settings.baseUrl (as the CLI's --base-url and the "
        "config's base_url)")

pytestmark = pytest.mark.skipif(NVIM is None, reason="Neovim is not installed (scripts/test.sh installs it)")


def test_the_plugin_sends_base_url_and_reads_the_old_name(tmp_path):
    out = tmp_path / "out.txt"
    env = {**os.environ, "KEVIN_NVIM_DIR": str(ROOT / "editors" / "nvim"), "KEVIN_TEST_OUT": str(out),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    assert NVIM is not None
    done = subprocess.run([NVIM, "--headless", "-n", "-u", str(ROOT / "tests" / "lsp" / "nvim" / "settings.lua")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text().splitlines() == [
        "NEW baseUrl=http://new/v1 endpoint=nil note=nil",
        f"OLD baseUrl=http://old/v1 endpoint=nil note={NOTE}",
        f"BOTH baseUrl=http://new/v1 endpoint=nil note={NOTE}",
        "NONE baseUrl=nil endpoint=nil note=nil",
    ]
