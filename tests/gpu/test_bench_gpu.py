"""``kevin bench --replies`` on a GPU: three KernelBench tasks, one answer each, judged side by side
by one evaluator, give the verdicts ``kevin eval`` gives each answer alone (stage, outcome,
correctness, trust; the speedups are measurements and differ a little run to run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_helpers import log_record

from kevin_agent.data import Verdict
from kevin_agent.store import RunStore

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
FEW_SHOT = ROOT / "tests" / "fixtures" / "kernelbench" / "few_shot"
TASKS = ("add", "fuse_gelu", "tiled_matmul")


def kevin(cwd: Path, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=380)
    return done, time.monotonic() - started


def facts(verdict: Verdict) -> tuple[object, ...]:
    """What judging the same answer must agree on, whoever ran it."""
    return (verdict.stage, verdict.ok, verdict.correct, verdict.trusted,
            verdict.details.correctness.trials_passed, verdict.details.correctness.trials_total)


@pytest.mark.timeout(400)
def test_bench_replies_side_by_side_give_the_verdicts_of_kevin_eval(tmp_path: Path, gpu_cache_dir: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    lines = [{"task": str(FEW_SHOT / f"model_ex_{n}.py"), "candidate": str(FEW_SHOT / f"model_new_ex_{n}.py")}
             for n in TASKS]
    (repo / "replies.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), KEVIN_BUILD_CACHE=str(gpu_cache_dir), KEVIN_EVAL_DAEMON_IDLE_S="0")
    done, bench_wall = kevin(repo, env, "bench", "--replies", "replies.jsonl", "--parallel", "3", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [t["candidates"] for t in result["tasks"]] == [1, 1, 1] and not result["replayed"]
    with RunStore.for_path(repo) as store:
        batch = {}
        for task in result["tasks"]:
            ((_, verdict),) = store.load_run(task["run_id"]).candidates
            assert verdict is not None and verdict.details.environment.gpu_name
            batch[task["name"]] = verdict
    walls = {}
    for name in TASKS:
        alone, walls[name] = kevin(repo, env, "eval", str(FEW_SHOT / f"model_ex_{name}.py"),
                                   str(FEW_SHOT / f"model_new_ex_{name}.py"), "--json", "--no-daemon")
        assert alone.returncode == 0, alone.stderr[-3000:]
        verdict = Verdict.from_dict(json.loads(alone.stdout))
        assert facts(batch[f"level0/model_ex_{name}"]) == facts(verdict), name
    log_record({"event": "bench-replies", "tasks": len(TASKS), "bench_wall_s": round(bench_wall, 2),
                "eval_walls_s": {n: round(w, 2) for n, w in walls.items()},
                "verdicts": {n: [str(f) for f in facts(v)] for n, v in batch.items()}})
    print(f"kevin bench of {len(TASKS)} tasks side by side: {bench_wall:.1f} s; kevin eval of each: {walls}")
