"""The load_inline recorder's reply, the length of what a candidate's words carry, and the
cleanup of the folder a candidate shaped: each attack through ``record_in_child`` confined and,
as the control, with the sandbox off (the defences here are the parent's, so both must hold),
then end to end through ``kevin eval --compile-only``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.build.specs import SourceExtractionError, record_in_child
from kevin_agent.evaluate.processes import remove_tree
from kevin_agent.evaluate.protocol import RECORD_MARKER

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
HUGE = 14_000_000
# A load_inline call whose name is computed, so the static extraction cannot read it: the recorder runs.
CALL = ("import os\nfrom torch.utils.cpp_extension import load_inline\n"
        "load_inline(name='real' + str(os.getpid() * 0), cpp_sources='int f();', functions=['f'])\n")
FORGED_STDOUT = ("import json\nprint({marker!r} + json.dumps({{'specs': [{{'name': 'forged', 'cpp_sources': ['x'],"
                 " 'cuda_sources': [], 'functions': []}}], 'error': 'E' * {huge}}}), flush=True)\n")
FORGED_PIPE = ("import json, os, sys\nline = {marker!r} + json.dumps({{'specs': [], 'error': 'E' * {huge}}}) + '\\n'\n"
               "fd = int(sys.argv[2])\nwhile line:\n    line = line[os.write(fd, line[:1 << 20].encode()):]\n"
               "raise RuntimeError('R' * {huge})\n")
DEEP = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
MODES = pytest.mark.parametrize("sandbox", ("off", "required"), ids=("control", "confined"))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """tempfile's folder for this test alone, so what a recording leaves there can be seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _message(code: str, sandbox: SandboxMode) -> str:
    with pytest.raises(SourceExtractionError) as caught:
        record_in_child(code, timeout_s=120, sandbox=sandbox)
    return str(caught.value)


@MODES
def test_a_reply_printed_on_stdout_is_not_the_recorders_reply(sandbox, private_tmp):
    """A copy of the reply line, printed by the candidate with a forged spec and a 14 MB error,
    is never read: the reply comes on its own pipe."""
    code = FORGED_STDOUT.format(marker=RECORD_MARKER, huge=HUGE) + CALL
    specs = record_in_child(code, timeout_s=120, sandbox=sandbox)
    assert [s.name for s in specs] == ["real0"]
    assert not list(private_tmp.iterdir())


@MODES
def test_a_reply_forged_on_the_recorders_own_pipe_reaches_the_model_cut(sandbox, private_tmp):
    """The strongest candidate writes a 14 MB error on the reply pipe itself (its number is in
    argv) and raises a 14 MB exception: the message holds a few KB and says it was cut."""
    message = _message(FORGED_PIPE.format(marker=RECORD_MARKER, huge=HUGE), sandbox)
    assert len(message) < 6000 and "cut" in message, len(message)
    assert not list(private_tmp.iterdir())


@MODES
def test_a_3000_deep_chain_of_folders_is_removed_and_the_recording_still_answers(sandbox, private_tmp):
    specs = record_in_child(DEEP + CALL, timeout_s=120, sandbox=sandbox)
    assert [s.name for s in specs] == ["real0"]
    assert not list(private_tmp.iterdir())


def test_the_control_shutil_rmtree_recurses_on_the_depth(tmp_path):
    """What the cleanup used: Python's rmtree recurses once per level and gives up on a 3000-deep
    chain (RecursionError, which ``ignore_errors`` does not cover); ``remove_tree`` removes it."""
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(str(KERNELS), "link", dir_fd=fd)  # never followed
    os.mkdir("closed", 0, dir_fd=fd)  # a folder no one may enter until its mode changes
    os.close(fd)
    with pytest.raises(RecursionError):
        shutil.rmtree(top, ignore_errors=True)
    assert remove_tree(top) and not top.exists() and (KERNELS / "add_task.py").is_file()


def test_remove_tree_never_raises_and_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, tmp_path / "link")
    assert remove_tree(tmp_path / "link") and (outside / "keep").is_file()  # the link goes, not its target
    assert remove_tree(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "file")


# ---------- end to end: one verdict, no traceback, nothing left behind ----------

def _candidate_with(head: str) -> str:
    text = (KERNELS / "add_candidate.py").read_text()
    return head + text.replace('name="kevin_fixture_elementwise_add"', 'name="e" + str(os.getpid() * 0)')


@pytest.mark.nvcc  # a compile-only evaluation resolves the toolchain and warms the shared header first
@pytest.mark.timeout(900)
@pytest.mark.parametrize("attack", ("forged_pipe", "deep"))
def test_kevin_eval_on_an_attack_ends_in_one_capped_verdict_and_leaves_nothing(attack, tmp_path, shared_build_cache):
    head = {"forged_pipe": FORGED_PIPE.format(marker=RECORD_MARKER, huge=HUGE),
            "deep": DEEP + "raise RuntimeError(3)\n"}
    candidate = tmp_path / "candidate.py"
    candidate.write_text("import os\n" + _candidate_with(head[attack]))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", str(KERNELS / "add_task.py"), str(candidate),
                           "--compile-only", "--json", "--arch", "9.0", "--sandbox", "required",
                           "--cache", str(shared_build_cache)],
                          capture_output=True, text=True, timeout=500, env={**os.environ, "TMPDIR": str(scratch)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["stage"] == "compile" and verdict["ok"] is False
    assert len(proc.stdout) < 30_000 and len(verdict["message"]) < 9000
    assert not list(scratch.iterdir())
