"""``kevin eval`` twice on a GPU: the first evaluates in its own process and starts a warm evaluator,
the second is answered by it, with a correct timed verdict too. The candidate is prebuilt in the
session cache (a build-cache hit), so the second call's wall is what a warm cache hit costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_helpers import log_record

from kevin_agent.data import Stage, Verdict

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "fixtures" / "kernels"


def kevin_eval(cache: Path, env: dict[str, str]) -> tuple[Verdict, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", str(KERNELS / "add_task.py"),
                           str(KERNELS / "add_candidate.py"), "--json", "--cache", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    return Verdict.from_dict(json.loads(done.stdout)), done.stderr, wall


def test_a_second_kevin_eval_is_answered_by_the_warm_evaluator(gpu_cache_dir: Path) -> None:
    from kevin_agent.evaluate.daemon import stop_daemons

    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEVIN_EVAL_DAEMON_IDLE_S": "120"}
    try:
        first, first_said, first_wall = kevin_eval(gpu_cache_dir, env)
        assert "started a warm evaluator" in first_said, first_said[-2000:]
        second, second_said, second_wall = kevin_eval(gpu_cache_dir, env)
        assert "evaluated by the warm evaluator" in second_said, second_said[-2000:]
        for verdict in (first, second):
            assert verdict.stage is Stage.TIMING and verdict.ok and verdict.correct
            assert verdict.details.build.cache_hit
        daemons = sorted((gpu_cache_dir / "daemon").glob("*.sock"))
        assert len(daemons) == 1
        log_record({"event": "warm-evaluator", "first_wall_s": round(first_wall, 2),
                    "second_wall_s": round(second_wall, 2)})
        print(f"kevin eval walls: {first_wall:.2f} s in its own process, {second_wall:.2f} s warm")
    finally:
        stopped = stop_daemons(gpu_cache_dir / "daemon")
    assert stopped == 1
