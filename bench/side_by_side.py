"""eval_bench and eval_cli_bench for this tree and an older one, in one run on one host (issue 42).

Each bench runs in a child process whose import path is its tree (``TREE`` and ``TREE/bench``), from
that tree's own bench script, one at a time (never two on the GPU at once), in the order old, new for
eval_bench and new, old for eval_cli (so a host that warms up or slows down favours neither). The
child's CPU seconds come from ``wait4`` (its own and every descendant it reaped: compilers, ninja,
workers; a warm evaluator ``kevin eval`` detaches is not counted). Ratios are new over old.

    git archive 67a6658 --prefix=67a6658/ | tar -x -C /tmp
    python bench/side_by_side.py --old /tmp/67a6658 --old-commit 67a6658 --out side_by_side.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
BENCHES = {
    "eval_bench": ("bench/eval_bench.py", "--evaluation-only", "--baseline", "0"),
    "eval_cli": ("bench/eval_cli_bench.py",),
}
ORDER = (("eval_bench", "old"), ("eval_bench", "new"), ("eval_cli", "new"), ("eval_cli", "old"))


def run_bench(tree: Path, bench: str, out: Path, work: Path, limit_s: float) -> dict[str, Any]:
    """One bench of one tree in a child process: its JSON result, wall, CPU seconds and exit."""
    script, *flags = BENCHES[bench]
    extra = ["--work", str(work)] if bench == "eval_bench" else ["--cache", str(work / "cache")]
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'bench'}", "PYTHONUNBUFFERED": "1"}
    env.pop("KEVIN_BUILD_CACHE", None)
    started = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        child = subprocess.Popen([sys.executable, str(tree / script), *flags, *extra, "--out", str(out)],
                                 cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        status, usage = _wait(child, limit_s)
    row: dict[str, Any] = {"wall_s": round(time.monotonic() - started, 2), "exit": status,
                           "cpu_s": round(usage.ru_utime + usage.ru_stime, 2) if usage else None}
    row["result"] = json.loads(out.read_text()) if out.exists() else None
    return row


def _wait(child: subprocess.Popen[bytes], limit_s: float) -> tuple[int, Optional[Any]]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode, usage
        time.sleep(0.2)
    child.kill()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return 124, usage


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's figures, new over old, from whichever benches finished."""
    out: dict[str, Any] = {}

    def kevin(label: str) -> Optional[dict[str, Any]]:
        result = rows.get(f"eval_bench/{label}", {}).get("result") or {}
        return result.get("kevin")

    new, old = kevin("new"), kevin("old")
    if new and old:
        for key in ("candidates_per_minute",):
            out[key] = {"new": new[key], "old": old[key], "new_over_old": new[key] / old[key]}
        part_new, part_old = new.get("breakdown", {}), old.get("breakdown", {})
        if part_new and part_old:
            out["builds_summed_s"] = {"new": part_new["builds_summed_s"], "old": part_old["builds_summed_s"],
                                      "new_over_old": part_new["builds_summed_s"] / part_old["builds_summed_s"]}
            out["gpu_busy_share"] = {"new": part_new["gpu_busy_s"] / new["wall_s"],
                                     "old": part_old["gpu_busy_s"] / old["wall_s"]}
        cpu_new, cpu_old = rows["eval_bench/new"]["cpu_s"], rows["eval_bench/old"]["cpu_s"]
        if cpu_new and cpu_old:
            out["eval_bench_process_cpu_s"] = {"new": cpu_new, "old": cpu_old, "new_over_old": cpu_new / cpu_old}
    cli_new = rows.get("eval_cli/new", {}).get("result") or {}
    cli_old = rows.get("eval_cli/old", {}).get("result") or {}
    for key in ("new_task", "new_candidate", "cache_hit", "cache_hit_no_daemon"):
        if key in cli_new and key in cli_old:
            out[f"eval_cli_{key}_wall_s"] = {"new": cli_new[key]["wall_s"], "old": cli_old[key]["wall_s"],
                                             "new_over_old": cli_new[key]["wall_s"] / cli_old[key]["wall_s"],
                                             "new_build_s": cli_new[key].get("build_s"),
                                             "old_build_s": cli_old[key].get("build_s")}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the older tree (an unpacked git archive)")
    parser.add_argument("--old-commit", required=True, help="the older tree's commit, for the record")
    parser.add_argument("--out", type=Path, required=True, help="write the results as JSON here")
    parser.add_argument("--only", default="eval_bench,eval_cli", help="benches to run (default both)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds one bench may take (default 300)")
    args = parser.parse_args(argv)
    trees = {"new": ROOT, "old": args.old.resolve()}
    wanted = set(args.only.split(","))
    from compile_bench import run_meta

    result: dict[str, Any] = {"meta": {**run_meta(), "command": "python bench/side_by_side.py " + " ".join(
        sys.argv[1:] if argv is None else argv)}, "old_commit": args.old_commit, "order": ORDER, "rows": {}}
    work = Path(tempfile.mkdtemp(prefix="kevin-side-by-side-"))
    for bench, label in ORDER:
        if bench not in wanted:
            continue
        print(f"side by side: {bench} {label} ...", file=sys.stderr, flush=True)
        row = run_bench(trees[label], bench, work / f"{bench}-{label}.json", work / f"{bench}-{label}", args.limit)
        result["rows"][f"{bench}/{label}"] = row
        print(f"side by side: {bench} {label}: exit {row['exit']}, {row['wall_s']} s, CPU {row['cpu_s']} s",
              file=sys.stderr, flush=True)
        result["summary"] = summary(result["rows"])
        args.out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    sys.exit(main())
