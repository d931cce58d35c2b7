"""CPU seconds per candidate build, this tree against another (issue 42's "figures that travel").

Both trees build the same fixture candidates in one run on one host, interleaved (round by round,
the order of the trees alternating), each in its own build cache whose precompiled headers are
built first and left out. Every build is new (the source is marked with the round), so round 0 is a
task's first candidate and later rounds are its later candidates (what a shared object of ours
saves shows there). CPU seconds are the build's child processes (compilers, ninja, the sandbox)
plus the building process's own, from ``getrusage``.

    git worktree add /tmp/kevin-67a6658 67a6658
    python bench/build_cpu_ratio.py --old /tmp/kevin-67a6658 --rounds 3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compile_bench import FIXTURES, run_meta  # noqa: E402

# Runs in a child whose first import path is the tree under test (its own kevin_agent).
CHILD = r"""
import dataclasses, json, resource, sys, time
from pathlib import Path
tree, root, round_index = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
names = [name for name in sys.argv[4].split(",") if name]
sys.path.insert(0, tree)
import kevin_agent
assert Path(kevin_agent.__file__).resolve().is_relative_to(Path(tree).resolve()), kevin_agent.__file__
from kevin_agent.evaluate.build.cache import BuildCache
from kevin_agent.evaluate.build.specs import extract_specs

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

cache = BuildCache(root)
cache.warm()
for name in names:
    (spec, *_), _ = extract_specs((Path(tree) / "tests/fixtures/kernels" / f"{name}_candidate.py").read_text())
    spec = dataclasses.replace(spec, cuda_sources=(*spec.cuda_sources, f"// build_cpu_ratio round {round_index}\n"))
    (own0, kids0), start = cpu(), time.monotonic()
    result = cache.build(spec)
    own1, kids1 = cpu()
    print("ROW " + json.dumps({"name": name, "round": round_index, "ok": result.ok, "path": result.path,
                               "wall_s": time.monotonic() - start, "cpu_s": own1 - own0 + kids1 - kids0,
                               "pch_s": result.pch_seconds}), flush=True)
"""


def run_tree(tree: Path, cache_root: Path, round_index: int, names: list[str]) -> list[dict[str, Any]]:
    """One round of builds in a child process importing ``tree``'s code."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(cache_root), str(round_index), ",".join(names)],
                          capture_output=True, text=True, cwd=tree, timeout=3600, check=False)
    rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode != 0 or len(rows) != len(names):
        raise RuntimeError(f"builds in {tree} failed: {proc.stderr[-1500:]}")
    return rows


def compare(old: Path, names: list[str], rounds: int) -> dict[str, Any]:
    trees = {"new": ROOT, "old": old}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kevin-build-cpu-ratio-") as tmp:
        for round_index in range(-1, rounds):  # round -1: each cache's headers, left out
            order = ("new", "old") if round_index % 2 == 0 else ("old", "new")
            for label in order:
                built = run_tree(trees[label], Path(tmp) / label, round_index, names if round_index >= 0 else [])
                for row in built:
                    row["tree"] = label
                    print(json.dumps(row), flush=True)
                    rows.append(row)

    def median(label: str, later: bool) -> float:
        return statistics.median(r["cpu_s"] for r in rows if r["tree"] == label and (r["round"] > 0) == later)

    summary = {}
    for later, name in ((False, "first_candidate"), (True, "later_candidates")):
        if rounds > 1 or not later:
            new, old_s = median("new", later), median("old", later)
            summary[name] = {"new_cpu_s": new, "old_cpu_s": old_s, "new_over_old": new / old_s}
    old_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=old, check=False).stdout.strip()
    meta = run_meta()
    meta["command"] = "python bench/build_cpu_ratio.py " + " ".join(sys.argv[1:])
    return {"rows": rows, "summary": summary, "old_tree": str(old), "old_commit": old_commit,
            "cpus": os.cpu_count(), "meta": meta}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the other tree (a checkout of the older code)")
    parser.add_argument("--only", help="comma-separated fixture names (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="builds of each candidate per tree (default 3)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    names = (args.only.split(",") if args.only
             else sorted(p.name[: -len("_candidate.py")] for p in FIXTURES.glob("*_candidate.py")))
    result = compare(args.old.resolve(), names, args.rounds)
    for name, figures in result["summary"].items():
        print(f"{name}: median CPU per build {figures['new_cpu_s']:.2f} s here, {figures['old_cpu_s']:.2f} s at "
              f"{result['old_commit']} ({figures['new_over_old']:.2f}x)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
