"""What issue 9 adds per candidate, measured on a GPU host: the static checks (rejections and
hints), listing the extension's kernels, and the worker's provenance stage (profiling one forward
call of the candidate, and of the reference when the baseline did not count its launches, then
judging). Target: at most 1.5 s per candidate on an H200 (issue 9, "Done when").

Also reported, apart from the budget: the profiler's one-time warm-up (paid by every worker before
READY, off any candidate's clock), the float64 reference run the correctness stage adds on its
first trial (deep copy + one fp64 forward), and the launch rate of a tiny kernel before and after
profiling (profiling must leave no overhead behind for the timing stage).

Runs in this process (no worker isolation: it measures costs, it does not judge untrusted code).
Candidates: the fixture kernels (tests/fixtures/kernels), KernelBench's example answers
(tests/fixtures/kernelbench/few_shot) and the provenance GPU fixtures (tests/fixtures/provenance_gpu).
Builds go to ``--cache`` (default: the GPU tests' ``$TMPDIR/kevin-gpu-provenance-cache``).

    PYTHONPATH=. python bench/provenance_bench.py [--only add,style_half] [--out bench/results/provenance.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kevin_agent.eval_modes import Policy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
KERNELS = ROOT / "tests" / "fixtures" / "kernels"
KB = ROOT / "tests" / "fixtures" / "kernelbench" / "few_shot"
PROV = ROOT / "tests" / "fixtures" / "provenance_gpu"
BUDGET_S = 1.5
PROV_TASKS = {"style_dispatch_guard_stream": "scale_relu", "style_float4_constant_positional": "add_scale",
              "style_half": "half_gelu", "style_shared_cub": "row_sum", "style_cooperative_groups": "row_sum",
              "style_two_extensions": "add_scale", "matmul_other_order": "matmul_k4096",
              "partial_cudnn_epilogue": "conv_bias_relu", "partial_token_fallback": "conv_bias_relu",
              "lax_self_attr": "mm", "lax_cpp_adl": "mm", "lax_compile_in_init": "mm"}


def candidates() -> list[tuple[str, str, str, Policy]]:
    """(id, task source, candidate source, policy)."""
    found: list[tuple[str, str, str, Policy]] = [
        (name, (KERNELS / f"{name}_task.py").read_text(), (KERNELS / f"{name}_candidate.py").read_text(), "strict")
        for name in ("add", "gelu", "matmul", "softmax")]
    for name in ("add", "fuse_gelu", "tiled_matmul", "flash_attn", "mnist2"):
        found.append((f"kb_{name}", (KB / f"model_ex_{name}.py").read_text(),
                      (KB / f"model_new_ex_{name}.py").read_text(), "partial" if name == "mnist2" else "strict"))
    for name, task in PROV_TASKS.items():
        found.append((name, (PROV / f"{task}_task.py").read_text(), (PROV / f"{name}.py").read_text(),
                      "partial" if name.startswith("partial") else "strict"))
    return found


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """(median seconds over ``repeat`` calls, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def launch_rate_us(device: Any, launches: int = 2000) -> float:
    """Microseconds per launch of a tiny kernel, host side (the timing stage's fixed cost)."""
    import torch

    x = torch.empty(1, device=device)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(launches):
        x.add_(1.0)
    torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / launches * 1e6


def measure_one(ident: str, task_src: str, cand_src: str, policy: Policy, cache_dir: Path, scratch: Path,
                handles: Any, device: Any) -> dict[str, Any]:
    import torch

    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_candidate
    from kevin_agent.evaluate.provenance import judge, launch_count
    from kevin_agent.evaluate.provenance.profile import profile_forward
    from kevin_agent.evaluate.provenance.symbols import list_kernels
    from kevin_agent.evaluate.static.checks import check_all
    from kevin_agent.evaluate.worker.correctness import Fp64Reference, to_device
    from kevin_agent.evaluate.worker.loader import install_build_hook, load_module_from_file
    from kevin_agent.evaluate.worker.provenance import own_kernels

    row: dict[str, Any] = {"id": ident, "policy": policy}
    row["static_s"], (rejections, hints) = timed(lambda: check_all(cand_src, task_src), repeat=5)
    row["static_rejections"], row["static_hints"] = [v.rule for v in rejections], len(hints)
    build = compile_candidate(cand_src, BuildCache(cache_dir))
    if not build.ok:
        return row | {"error": "build failed: " + build.message[:500]}
    paths = [r.module_path for r in build.results if r.module_path]  # all of them: the build is ok
    row["list_kernels_s"], _ = timed(lambda: [list_kernels(p) for p in paths], repeat=3)
    loaded: list[Any] = []
    install_build_hook(cache_dir, None, loaded)
    task = load_module_from_file(task_src, scratch / f"{ident}_task.py", f"bench_task_{ident}")
    module = load_module_from_file(cand_src, scratch / f"{ident}.py", f"bench_cand_{ident}")
    torch.manual_seed(0)
    init = to_device(list(task.get_init_inputs()), device)
    torch.manual_seed(0)
    reference = task.Model(*init).to(device)
    torch.manual_seed(0)
    candidate = module.ModelNew(*init).to(device)
    inputs = to_device(task.get_inputs(), device)
    with torch.no_grad():
        candidate(*inputs), reference(*inputs)  # first calls (lazy init, torch.compile) off the clock
    torch.cuda.synchronize(device)
    row["own_kernels_s"], (own, _) = timed(lambda: own_kernels(loaded))
    # the worker pads each profile with 16 throwaway kernels (CUPTI may corrupt one more head record
    # per session in a process); this process runs many sessions, so it pads for all of them
    row["profile_candidate_s"], cand = timed(lambda: _profile(profile_forward, candidate, inputs, device, handles))
    row["profile_reference_s"], ref = timed(lambda: _profile(profile_forward, reference, inputs, device, handles))
    row["judge_s"], result = timed(lambda: judge(cand, own, launch_count(ref), policy), repeat=5)
    row["forward_ms"] = _forward_ms(candidate, inputs, device)
    row["fp64_first_s"], _ = timed(lambda: Fp64Reference(reference)(inputs))
    row["verdict"] = result.summary
    row["per_candidate_s"] = (row["static_s"] + row["list_kernels_s"] + row["own_kernels_s"]
                              + row["profile_candidate_s"] + row["judge_s"])
    row["per_candidate_with_reference_s"] = row["per_candidate_s"] + row["profile_reference_s"]
    return row


SESSIONS = [1]  # profiling sessions so far in this process (the warm-up is the first)


def _profile(profile_forward: Callable[..., Any], fn: Any, inputs: Any, device: Any, handles: Any) -> Any:
    SESSIONS[0] += 1
    return profile_forward(fn, inputs, device, handles, padding=16 + SESSIONS[0])


def _forward_ms(fn: Any, inputs: Any, device: Any) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        start.record()
        fn(*inputs)
        end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated candidate ids")
    parser.add_argument("--cache", default=os.environ.get("KEVIN_GPU_TEST_CACHE")
                        or str(Path(tempfile.gettempdir()) / "kevin-gpu-provenance-cache"))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import torch

    from kevin_agent.evaluate.provenance.profile import capture_handles, warm_up

    device = torch.device("cuda", torch.cuda.current_device())
    torch.empty(1, device=device)
    handles = capture_handles()
    before = launch_rate_us(device)
    warm_s, _ = timed(lambda: warm_up(device, handles))
    after = launch_rate_us(device)
    wanted = {x for x in args.only.split(",") if x}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kevin-prov-bench-") as scratch:
        for ident, task_src, cand_src, policy in candidates():
            if wanted and ident not in wanted:
                continue
            try:
                row = measure_one(ident, task_src, cand_src, policy, Path(args.cache), Path(scratch), handles, device)
            except Exception as exc:  # one broken candidate must not lose the others' numbers
                row = {"id": ident, "error": f"{type(exc).__name__}: {exc}"[:500]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    after_all = launch_rate_us(device)
    summary = _summary(rows, warm_s, before, after, after_all)
    report = {"host": platform.node(), "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "python": platform.python_version(), "budget_s": BUDGET_S, "summary": summary, "rows": rows}
    print(_table(rows, summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if summary["max_per_candidate_s"] is not None and summary["max_per_candidate_s"] <= BUDGET_S else 1


def _summary(rows: list[dict[str, Any]], warm_s: float, before: float, after: float,
             after_all: float) -> dict[str, Any]:
    good = [r for r in rows if "per_candidate_s" in r]
    totals = [r["per_candidate_with_reference_s"] for r in good]
    return {"candidates": len(rows), "measured": len(good), "errors": [r["id"] for r in rows if "error" in r],
            "max_per_candidate_s": max(totals) if totals else None,
            "median_per_candidate_s": statistics.median(totals) if totals else None,
            "profiler_warm_up_s": warm_s, "launch_us_before_profiling": before,
            "launch_us_after_warm_up": after, "launch_us_after_all": after_all}


def _table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = ["| candidate | static | list kernels | profile candidate | profile reference | judge "
             "| total (with reference) | forward | fp64 first trial | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['id']} | error: {r['error'][:80]} |||||||||")
            continue
        lines.append(f"| {r['id']} | {r['static_s'] * 1e3:.1f} ms | {r['list_kernels_s'] * 1e3:.1f} ms | "
                     f"{r['profile_candidate_s'] * 1e3:.0f} ms | {r['profile_reference_s'] * 1e3:.0f} ms | "
                     f"{r['judge_s'] * 1e3:.1f} ms | {r['per_candidate_s']:.3f} s "
                     f"({r['per_candidate_with_reference_s']:.3f} s) | "
                     f"{r['forward_ms']:.3f} ms | {r['fp64_first_s'] * 1e3:.0f} ms | {r['verdict']} |")
    lines.append("")
    lines.append(f"max per candidate (with the reference profiled too): {summary['max_per_candidate_s']} s "
                 f"(budget {BUDGET_S} s); median {summary['median_per_candidate_s']} s")
    lines.append(f"profiler warm-up (once per worker, before READY): {summary['profiler_warm_up_s']:.2f} s; "
                 f"tiny-kernel launch: {summary['launch_us_before_profiling']:.2f} us before profiling, "
                 f"{summary['launch_us_after_warm_up']:.2f} us after the warm-up, "
                 f"{summary['launch_us_after_all']:.2f} us after all profiles")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
