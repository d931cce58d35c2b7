"""Where one candidate build's CPU seconds go (issue 42): each ninja step, the facts child, the rest.

For each fixture candidate: one cold split build (a new cache entry: the source is marked with the
time; the shared precompiled headers already built and left out), ninja run with one job so each
step's wall time is its CPU time. The steps come from the build's ``.ninja_log`` (copied before
the build folder is removed); the facts child (``build_facts``: symbol listing and the preprocessed
units' origins) is timed around its call; CPU seconds of every child process come from ``getrusage(RUSAGE_CHILDREN)``.

    python bench/build_breakdown.py [--only add,gelu] [--rounds 2] [--out results.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compile_bench import FIXTURES, run_meta  # noqa: E402

import kevin_agent.evaluate.build.cache as cache_module  # noqa: E402
from kevin_agent.evaluate.build.cache import BuildCache  # noqa: E402
from kevin_agent.evaluate.build.specs import extract_specs  # noqa: E402


def step_kind(output: str) -> str:
    """A ninja output's part of the build, by name."""
    if output.endswith(".so"):
        return "link"
    if output.startswith("module_init"):
        return "module entry (no headers)"
    if output.endswith(".ii"):
        return "preprocess (origins)"
    if output.startswith("bindings"):
        return "binding (full torch PCH)"
    if output.startswith(("kernels", "cuda")) or ".cuda." in output:
        return "kernels (nvcc)"
    return "host (torch PCH, no Python)"


def read_ninja_log(path: Path) -> list[dict[str, Any]]:
    """(output, seconds) of each step in a ``.ninja_log`` (v5: start ms, end ms, mtime, output, hash)."""
    steps = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, output, *_ = line.split("\t")
        steps.append({"output": output, "kind": step_kind(output), "s": (int(end) - int(start)) / 1000})
    return steps


class Capture:
    """Keeps each removed build folder's ``.ninja_log`` and the facts child's seconds."""

    def __init__(self) -> None:
        self.logs: list[list[dict[str, Any]]] = []
        self.facts_s: list[float] = []
        self._rmtree = shutil.rmtree
        self._facts = cache_module.build_facts

    def __enter__(self) -> Capture:
        def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
            log = Path(path) / ".ninja_log"
            if log.is_file():
                self.logs.append(read_ninja_log(log))
            self._rmtree(path, *args, **kwargs)

        def facts(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return self._facts(*args, **kwargs)
            finally:
                self.facts_s.append(time.monotonic() - start)

        setattr(cache_module.shutil, "rmtree", rmtree)  # noqa: B010 - a stand-in, put back on exit
        setattr(cache_module, "build_facts", facts)  # noqa: B010
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(cache_module.shutil, "rmtree", self._rmtree)  # noqa: B010
        setattr(cache_module, "build_facts", self._facts)  # noqa: B010


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def breakdown(names: list[str], rounds: int, root: Path | None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kevin-build-breakdown-") as tmp:
        cache = BuildCache(root or Path(tmp) / "cache", ninja_jobs=1)
        cache.warm()  # the precompiled headers: once, not part of any build below
        for round_index in range(rounds):
            for name in names:
                (spec, *_), _ = extract_specs((FIXTURES / f"{name}_candidate.py").read_text())
                mark = f"// build_breakdown {time.time()} round {round_index}\n"
                marked = dataclasses.replace(spec, cuda_sources=(*spec.cuda_sources, mark))
                cpu_before = children_cpu_s()
                with Capture() as capture:
                    result = cache.build(marked)
                steps = [step for log in capture.logs for step in log]
                parts: dict[str, float] = {}
                for step in steps:
                    parts[step["kind"]] = parts.get(step["kind"], 0.0) + step["s"]
                parts["facts child"] = sum(capture.facts_s)
                row = {"name": name, "round": round_index, "ok": result.ok, "path": result.path,
                       "wall_s": result.seconds, "children_cpu_s": children_cpu_s() - cpu_before,
                       "parts_s": parts, "steps": steps}
                print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
                rows.append(row)
    kinds = sorted({kind for row in rows for kind in row["parts_s"]})
    medians = {kind: statistics.median(row["parts_s"].get(kind, 0.0) for row in rows) for kind in kinds}
    return {"rows": rows, "median_parts_s": medians,
            "median_wall_s": statistics.median(row["wall_s"] for row in rows),
            "median_children_cpu_s": statistics.median(row["children_cpu_s"] for row in rows),
            "meta": {**run_meta(), "command": "python bench/build_breakdown.py " + " ".join(sys.argv[1:])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated fixture names (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="cold builds of each candidate (default 1)")
    parser.add_argument("--cache", type=Path, help="a build cache whose headers are built (default: a new one)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    names = (args.only.split(",") if args.only
             else sorted(p.name[: -len("_candidate.py")] for p in FIXTURES.glob("*_candidate.py")))
    result = breakdown(names, args.rounds, args.cache)
    total = sum(result["median_parts_s"].values())
    print("\npart | median s | share")
    for kind, seconds in sorted(result["median_parts_s"].items(), key=lambda item: -item[1]):
        print(f"{kind} | {seconds:.2f} | {seconds / total:.0%}")
    print(f"median build wall {result['median_wall_s']:.2f} s, children's CPU {result['median_children_cpu_s']:.2f} s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
