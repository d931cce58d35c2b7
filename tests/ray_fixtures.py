"""What the Ray tests run on the cluster's nodes instead of nvcc: ``fake_compile`` makes a real
build cache entry (``result.json``, a log, a stand-in ``.so`` naming the node that built it) in the
node's own cache, like ``compile_candidate`` would, so entries really travel between machines.

The candidate's source can say "fake-compile: SECONDS" (how long the build takes), "fake-compile:
error" (a compile error), "fake-compile: child SECONDS" (the build runs in a child process group,
like ninja, and the child's pid goes to $KEVIN_TEST_PID_DIR/compile-<pid>: a Ray task has its
node's environment and this host's PIDs) or "fake-compile:
barrier" (the build finishes only once builds have started on two different nodes: a test that
wants both nodes to compile controls that itself instead of hoping the timing works out).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from kevin_agent import feedback
from kevin_agent.evaluate.build.cache import BuildCache, BuildResult
from kevin_agent.evaluate.build.compile import CompileOutcome

BARRIER_GUARD_S = 600.0  # a guard only: the other node's build starts within seconds


def _wait_for_a_second_node(node: str) -> None:
    """Mark a build started on ``node``; return once one has started on another node too."""
    folder = Path(os.environ["KEVIN_TEST_PID_DIR"])
    (folder / f"barrier-{node}-{os.getpid()}").touch()
    deadline = time.monotonic() + BARRIER_GUARD_S
    while time.monotonic() < deadline:
        if len({p.name.removeprefix("barrier-").rsplit("-", 1)[0] for p in folder.glob("barrier-*")}) >= 2:
            return
        time.sleep(0.1)


def _spec(code: str) -> tuple[str, float]:
    if "fake-compile: barrier" in code:
        return "barrier", 0.0
    marker = re.search(r"fake-compile: ?(error|child)? ?([\d.]+)?", code)
    if not marker:
        return "normal", 0.3
    return marker.group(1) or "normal", float(marker.group(2) or 0.3)


def fake_compile(code: str, cache: BuildCache) -> CompileOutcome:
    mode, seconds = _spec(code)
    node = os.environ.get("KEVIN_RAY_NODE_NAME", "?")
    if mode == "error":
        time.sleep(seconds)
        errors = "kernel.cu(3): error: identifier \"b_undeclared\" is undefined"
        result = BuildResult(False, seconds, False, None, errors, "split", None)
        return CompileOutcome(False, feedback.compile_error(errors), [result], "static")
    key = "fake" + hashlib.sha256(code.encode()).hexdigest()[:40]
    final = cache.root / "ext" / key
    hit = (final / "result.json").is_file()
    if not hit:
        if mode == "child" and not _build_in_child(seconds):  # killed: a failed build, cached like one
            return _failed_entry(final, key, node)
        if mode == "barrier":
            _wait_for_a_second_node(node)
        elif mode != "child":
            time.sleep(seconds)
        (cache.root / "tmp").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache.root / "tmp"))
        (tmp / "split").mkdir()
        (tmp / "split" / f"kevin_{key[:16]}.so").write_text(f"built on {node}\n")
        (tmp / "split" / "kernels.o").write_text("object file: never travels\n")
        (tmp / "build.log").write_text(f"[1/1] fake build on {node}\n")
        stored = {"ok": True, "seconds": seconds, "cache_hit": False, "log_path": str(final / "build.log"),
                  "errors": None, "path": "split", "module_path": str(final / "split" / f"kevin_{key[:16]}.so"),
                  "key": key}
        (tmp / "result.json").write_text(json.dumps(stored))
        final.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.rename(tmp, final)
    raw = json.loads((final / "result.json").read_text())
    raw.update(cache_hit=hit)
    return CompileOutcome(True, feedback.compiled_only(), [BuildResult(**raw)], "static")


def _build_in_child(seconds: float) -> bool:
    """A build step in its own process group, as ninja runs (a cancel must kill it)."""
    child = subprocess.Popen(["sleep", str(seconds)], start_new_session=True)
    folder = os.environ.get("KEVIN_TEST_PID_DIR")
    if folder:
        open(os.path.join(folder, f"compile-{child.pid}"), "w").close()
    return child.wait() == 0


def _failed_entry(final: Path, key: str, node: str) -> CompileOutcome:
    errors = f"ninja: build stopped: subcommand failed (on {node})"
    final.mkdir(parents=True, exist_ok=True)
    result = BuildResult(False, 0.0, False, str(final / "build.log"), errors, "split", None, key=key)
    (final / "build.log").write_text(errors + "\n")
    (final / "result.json").write_text(json.dumps(result.__dict__))
    return CompileOutcome(False, feedback.compile_error(errors), [result], "static")
