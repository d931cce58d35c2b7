"""What one ``kevin eval`` costs a user, as separate processes sharing one build cache:

  1. a new task (its baselines measured, the precompiled header built if this cache has none);
  2. a new candidate for that task (a cold compile of its kernel; baselines reused from disk);
  3. the same candidate again (a build-cache hit);
  4. the same again with ``--no-daemon`` (in its own process, every start-up paid: the comparison).

Each is ``python -m kevin_agent eval TASK CANDIDATE --json`` timed from spawn to exit (the whole
wall a user waits). The first starts a warm evaluator (``evaluate.daemon``) that answers (2) and
(3); each row says whether it did. The bench stops it at the end. Targets (issue 20, H200):
(2) <= 15 s, (3) <= 3 s. Needs torch, nvcc, a GPU.

    python bench/eval_cli_bench.py [--out FILE] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kevin_agent.data import Verdict  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


def variant(threads: int) -> str:
    """The add fixture's candidate with another block size and its own extension name: a new build."""
    code = (FIXTURES / "add_candidate.py").read_text()
    code = code.replace("const int threads = 256;", f"const int threads = {threads};")
    return re.sub(r'name="kevin_fixture_\w+"', f'name="kevin_cli_bench_{threads}"', code, count=1)


def timed_eval(task: Path, candidate: Path, cache: Path, *flags: str) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "eval", f"{task}::Model", str(candidate),
                           "--json", "--cache", str(cache), *flags], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    row: dict[str, Any] = {"wall_s": round(wall, 2), "exit": done.returncode,
                           "warm_evaluator": "evaluated by the warm evaluator" in done.stderr,
                           "started_warm_evaluator": "started a warm evaluator" in done.stderr}
    try:
        verdict = Verdict.from_dict(json.loads(done.stdout))
        details = verdict.details
        row.update(stage=verdict.stage.value, ok=verdict.ok, cache_hit=details.build.cache_hit,
                   build_s=details.build.seconds, baseline_cached=details.timing.baseline_cached,
                   baseline_s=details.timing.baseline_seconds, stage_s=dict(details.environment.stage_seconds))
        # the worker's stages and the judge, whole (their parts are named stage_part: counted once)
        gpu = sum(v for k, v in details.environment.stage_seconds.items() if "_" not in k)
        row["gpu_stages_s"] = round(gpu, 2)
        # what is neither build, baselines nor the GPU stages: the process's start and imports, the
        # environment checks, a worker start no build hid, the hand-overs
        row["rest_s"] = round(wall - gpu - (details.build.seconds or 0.0) - (details.timing.baseline_seconds or 0.0), 2)
    except (ValueError, KeyError):
        row["stderr_tail"] = done.stderr[-800:]
    return row


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--cache", type=Path, help="build cache (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kevin-eval-cli-"))
    cache = args.cache or work / "cache"
    task = FIXTURES / "add_task.py"
    first, second = work / "first.py", work / "second.py"
    first.write_text(variant(128))
    second.write_text(variant(512))
    result: dict[str, Any] = {"cache": str(cache)}
    runs = (("new_task", first, ()), ("new_candidate", second, ()), ("cache_hit", second, ()),
            ("cache_hit_no_daemon", second, ("--no-daemon",)))
    try:
        for label, candidate, flags in runs:
            result[label] = timed_eval(task, candidate, cache, *flags)
            print(f"eval cli bench: {label}: {result[label]}", file=sys.stderr, flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=2))
    finally:
        from kevin_agent.evaluate.daemon import stop_daemons

        result["warm_evaluators_stopped"] = stop_daemons(cache / "daemon")
        # what the warm evaluators said (empty when all went well): the first place to look
        result["warm_evaluator_logs"] = {log.name: log.read_text(errors="replace")[-2000:]
                                         for log in sorted((cache / "daemon").glob("*.log")) if log.stat().st_size}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(f"kevin eval walls: new task {result['new_task']['wall_s']} s, new candidate "
          f"{result['new_candidate']['wall_s']} s (target <= 15), cache hit {result['cache_hit']['wall_s']} s "
          f"(target <= 3; {result['cache_hit_no_daemon']['wall_s']} s in its own process with --no-daemon)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
