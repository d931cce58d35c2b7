"""Compile-time benchmark of the build cache on the fixture candidates.

For each candidate: cold split path, cold whole path, stock ``load_inline`` (fresh build dir),
cache hit (build lookup) and cache hit including import in a fresh process; plus the one-time
precompiled-header cost. Prints a table; ``--out FILE`` writes the numbers as JSON.

    python bench/compile_bench.py [--only add,gelu] [--skip-stock] [--out results.json]
    python bench/compile_bench.py --sandbox-cost 3 --out results.json   # confined vs unconfined

``--sandbox-cost N`` measures what closing the compile path costs (issue 18), in one run: each
candidate built cold N times unconfined (``sandbox = "off"``) and N times confined (``"required"``),
alternating which goes first, each build made distinct by a comment (a new cache entry, the same
work) so the shared precompiled header of each mode's cache is built once and left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kevin_agent.evaluate.build.cache import BuildCache  # noqa: E402
from kevin_agent.evaluate.build.specs import extract_specs  # noqa: E402
from kevin_agent.evaluate.source.calls import ExtensionSpec  # noqa: E402

if TYPE_CHECKING:
    from kevin_agent.eval_modes import SandboxMode

FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


def stock_load_inline_seconds(spec: ExtensionSpec, build_dir: Path) -> float:
    """Stock load_inline in a fresh process and a fresh build directory (torch import excluded)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    script = textwrap.dedent(f"""
        import json, time, torch
        from torch.utils.cpp_extension import load_inline
        spec = json.loads({json.dumps(json.dumps(spec.to_dict()))})
        start = time.monotonic()
        load_inline(name="bench_" + spec["name"], cpp_sources=spec["cpp_sources"], cuda_sources=spec["cuda_sources"],
                    functions=spec["functions"], extra_cflags=spec["extra_cflags"],
                    extra_cuda_cflags=spec["extra_cuda_cflags"], extra_ldflags=spec["extra_ldflags"],
                    build_directory={str(build_dir)!r})
        print("SECONDS", time.monotonic() - start)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("SECONDS"):
            return float(line.split()[1])
    raise RuntimeError(f"stock load_inline failed: {proc.stderr[-800:]}")


def hit_with_import_seconds(root: Path, spec: ExtensionSpec) -> float:
    """A fresh process (torch already imported) loading the cached module."""
    script = textwrap.dedent(f"""
        import json, time, torch
        from pathlib import Path
        from kevin_agent.evaluate.build.cache import BuildCache, ExtensionSpec
        spec = ExtensionSpec.from_dict(json.loads({json.dumps(json.dumps(spec.to_dict()))}))
        start = time.monotonic()
        BuildCache(Path({str(root)!r})).load(spec)
        print("SECONDS", time.monotonic() - start)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("SECONDS"):
            return float(line.split()[1])
    raise RuntimeError(f"cached load failed: {proc.stderr[-800:]}")


def bench(names: list[str], skip_stock: bool, skip_whole: bool) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kevin-compile-bench-") as tmp:
        root = Path(tmp) / "cache"
        pch_seconds = 0.0
        for name in names:
            (spec, *_), _ = extract_specs((FIXTURES / f"{name}_candidate.py").read_text())
            row: dict = {"name": name}
            split = BuildCache(root).build(spec)
            pch_seconds += split.pch_seconds
            row["split_path"] = split.path
            row["split_cold_s"] = split.seconds - split.pch_seconds
            row["split_ok"] = split.ok
            if not skip_whole:
                whole = BuildCache(root, split=False).build(spec)
                pch_seconds += whole.pch_seconds
                row["whole_cold_s"] = whole.seconds - whole.pch_seconds
            row["hit_s"] = BuildCache(root).build(spec).seconds
            row["hit_with_import_s"] = hit_with_import_seconds(root, spec) if split.ok else None
            print(json.dumps(row), flush=True)
            if not skip_stock:
                row["stock_load_inline_s"] = stock_load_inline_seconds(spec, Path(tmp) / f"stock-{name}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    split_times = [r["split_cold_s"] for r in rows]
    return {
        "cpus": os.cpu_count(), "pch_one_time_s": pch_seconds, "rows": rows,
        "median_split_cold_s": statistics.median(split_times) if split_times else None,
        "meta": run_meta(),
    }


def run_meta() -> dict:
    """Where and at which commit this ran (bench/make_results.py shows it with the figures)."""
    import platform
    import time

    import torch

    from kevin_agent.evaluate.build.flags import toolchain

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False)
        return done.stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain") else ""
    stated = os.environ.get("KEVIN_SOURCE_COMMIT")  # a copied tree whose .git lags (the device tool)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = f", load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    nvcc = toolchain(os.environ.get("TORCH_CUDA_ARCH_LIST")).nvcc_version
    commit = f"{stated[:7]} (stated by KEVIN_SOURCE_COMMIT)" if stated else git("rev-parse", "--short", "HEAD") + dirty
    return {"commit": commit, "date": time.strftime("%Y-%m-%d"),
            "command": "python bench/compile_bench.py " + " ".join(sys.argv[1:]),
            "host": f"{gpu}, {os.cpu_count()} CPU cores{load}, torch {torch.__version__}, nvcc {nvcc}, "
                    f"Python {platform.python_version()}"}


def sandbox_cost(names: list[str], rounds: int) -> dict:
    """Cold split builds, confined and not, interleaved (see the module's docstring)."""
    modes: tuple[SandboxMode, ...] = ("off", "required")
    rows: list[dict] = []
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="kevin-compile-bench-") as tmp:
        caches = {}
        for mode in modes:
            cache = BuildCache(Path(tmp) / mode)
            cache.sandbox = mode
            cache.warm()  # the precompiled header, once per cache: not part of any build below
            caches[mode] = cache
        for round_index in range(rounds):
            for position, name in enumerate(names):
                (spec, *_), _ = extract_specs((FIXTURES / f"{name}_candidate.py").read_text())
                order = modes if (round_index + position) % 2 == 0 else modes[::-1]
                for mode in order:
                    marked = dataclasses.replace(spec, cuda_sources=(*spec.cuda_sources,
                                                                     f"// compile_bench round {round_index} {mode}\n"))
                    result = caches[mode].build(marked)
                    cold = result.seconds - result.pch_seconds
                    row = {"name": name, "round": round_index, "sandbox": mode, "ok": result.ok, "cold_s": cold}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    seconds[mode].append(cold)
    medians = {m: statistics.median(seconds[m]) for m in modes}
    return {"cpus": os.cpu_count(), "rounds": rounds, "rows": rows, "median_cold_s": medians,
            "confined_over_unconfined": medians["required"] / medians["off"], "meta": run_meta()}


def print_table(result: dict) -> None:
    cols = ["name", "split_path", "split_cold_s", "whole_cold_s", "stock_load_inline_s", "hit_s", "hit_with_import_s"]
    print("\n" + " | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for row in result["rows"]:
        cells = [row.get(c) for c in cols]
        print(" | ".join(f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells))
    print(f"\nPCH one-time: {result['pch_one_time_s']:.1f} s; "
          f"median cold split: {result['median_split_cold_s']:.1f} s; CPUs: {result['cpus']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated fixture names (default: all)")
    parser.add_argument("--skip-stock", action="store_true", help="do not time stock load_inline")
    parser.add_argument("--skip-whole", action="store_true", help="do not time the whole path")
    parser.add_argument("--sandbox-cost", type=int, metavar="N",
                        help="instead: N cold builds per candidate confined and N unconfined, interleaved")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    names = (args.only.split(",") if args.only
             else sorted(p.name[: -len("_candidate.py")] for p in FIXTURES.glob("*_candidate.py")))
    if args.sandbox_cost:
        result = sandbox_cost(names, args.sandbox_cost)
        print(f"median cold build: unconfined {result['median_cold_s']['off']:.2f} s, confined "
              f"{result['median_cold_s']['required']:.2f} s ({result['confined_over_unconfined']:.3f}x)")
    else:
        result = bench(names, args.skip_stock, args.skip_whole)
        print_table(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
