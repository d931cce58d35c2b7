"""Whether the sandbox made a compile fail comes from the launcher's exit status, never from the
compiler's words: a source whose ``#error`` says "Permission denied" is the source's failure (and
cached like any other), a launcher that could not confine is the sandbox's (never cached)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kevin_agent.evaluate.build.cache import BuildCache, BuildResult
from kevin_agent.evaluate.build.log import SANDBOX_FAILED, launcher_failed, sandbox_refused
from kevin_agent.evaluate.build.ninja_file import run_confined
from kevin_agent.evaluate.sandbox import compile_policy, launch_command

FORGED = "cuda_sources(3): error: #error kevin-sandbox: cannot run nvcc: Permission denied\nOperation not permitted\n"


def _step(tmp_path: Path, script: str, confined: bool, mode: str = "required") -> tuple[int | None, bool]:
    """Run ``python -c script`` as a compile step in tmp/work (confined like a build, or not);
    (status, whether the step was marked a sandbox failure)."""
    work = tmp_path / "work"
    work.mkdir()
    policy = compile_policy(work)
    confine = (lambda argv: launch_command(policy, argv, mode)) if confined else None
    status, _ = run_confined([sys.executable, "-c", script], work, 120.0, confine)
    return status, (tmp_path / SANDBOX_FAILED).exists()


@pytest.mark.parametrize("confined", (False, True), ids=("control", "confined"))
def test_a_compiler_that_prints_the_sandboxs_words_is_not_a_sandbox_failure(tmp_path, confined):
    status, marked = _step(tmp_path, f"import sys; sys.stdout.write({FORGED!r}); sys.exit(1)", confined)
    assert status == 1 and not marked
    assert sandbox_refused(FORGED)  # the control: the text classifier the cache used would say "sandbox"


def test_a_launcher_that_cannot_run_the_program_is_a_sandbox_failure(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    policy = compile_policy(work)
    status, _ = run_confined([sys.executable, "-c", "pass"], work, 120.0,
                             lambda argv: launch_command(policy, ["/nonexistent/nvcc"], "required"))
    assert status == 127 and (tmp_path / SANDBOX_FAILED).exists()


def test_the_launchers_statuses_are_the_only_ones_counted():
    assert [s for s in range(-20, 256) if launcher_failed(s)] == [70, 71, 127]
    assert not launcher_failed(None) and not launcher_failed(1) and not launcher_failed(2)


@pytest.mark.parametrize("marked", (False, True))
def test_the_cache_reads_the_mark_not_the_log(tmp_path, marked):
    (tmp_path / "build.log").write_text(FORGED)
    if marked:
        (tmp_path / SANDBOX_FAILED).touch()
    cache = BuildCache(tmp_path / "cache")
    cache.sandbox = "required"
    result = BuildResult(False, 0.0, False, str(tmp_path / "build.log"), "err", "split", None)
    assert cache._sandbox_failed(result) is marked
    json.dumps(result.__dict__)  # a plain record: nothing of the mark travels in it
