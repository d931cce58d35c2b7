"""Benchmark kevin-agent's evaluator against stock load_inline, KernelBench-style, in one run.

For 16 varied candidates (the fixture kernels plus generated variants: other block sizes and
tiles, one compile error, one incorrect, one slow) it measures
  1. cold compile through ``compile_many`` (fresh cache): per-candidate median and p90, batch wall;
  2. cache hit: the same batch again;
  3. full evaluation with ``CudaEvaluator`` from a fresh cache (static, parallel compile, isolated
     GPU runs with a spare worker): worker start (hidden), visible wait, GPU stage per candidate,
     candidates fully evaluated per minute;
  4. the baseline: stock ``load_inline`` in this process, one candidate after another, each
     compiled, checked (5 trials, KernelBench's 1e-2 tolerance) and timed (100 CUDA-event trials).
Prints a table; ``--out FILE`` writes JSON; ``--quick`` runs 4 candidates. Needs only torch and
the standard library (python3.12 + torch 2.11 on the GPU host).

    python bench/eval_bench.py [--quick] [--out bench/results.json] [--baseline N]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


@dataclass(frozen=True)
class BenchCandidate:
    id: str
    task: str  # fixture task name: add, gelu, matmul, softmax
    code: str
    expect: str  # "correct", "compile-error", "incorrect", "slow"


def _variant(task: str, new_name: str, edits: list[tuple[str, str]]) -> str:
    code = (FIXTURES / f"{task}_candidate.py").read_text()
    for old, new in edits:
        if old not in code:
            raise SystemExit(f"bench: fixture {task}_candidate.py no longer contains {old!r}")
        code = code.replace(old, new)
    import re

    code, count = re.subn(r'name="kevin_fixture_\w+"', f'name="{new_name}"', code)
    if count != 1:
        raise SystemExit(f"bench: expected one load_inline name in {task}_candidate.py")
    return code


def build_candidates(quick: bool) -> list[BenchCandidate]:
    """16 distinct sources (4 with --quick), each paired with a fixture task."""
    threads = "const int threads = 256;"
    specs: list[tuple[str, str, list[tuple[str, str]], str]] = [
        ("add", "add", [], "correct"),
        ("gelu", "gelu", [], "correct"),
        ("matmul", "matmul", [], "correct"),
        ("softmax", "softmax", [], "correct"),
        ("add_t128", "add", [(threads, "const int threads = 128;")], "correct"),
        ("add_t512", "add", [(threads, "const int threads = 512;")], "correct"),
        ("add_t1024", "add", [(threads, "const int threads = 1024;")], "correct"),
        ("add_grid2", "add", [("65535 * 8", "65535 * 2")], "correct"),
        ("gelu_t128", "gelu", [(threads, "const int threads = 128;")], "correct"),
        ("gelu_t1024", "gelu", [(threads, "const int threads = 1024;")], "correct"),
        ("matmul_tile16", "matmul", [("#define TILE 32", "#define TILE 16")], "correct"),
        ("softmax_t256", "softmax", [("const int threads = 512;", "const int threads = 256;")], "correct"),
        ("softmax_t1024", "softmax", [("const int threads = 512;", "const int threads = 1024;")], "correct"),
        ("add_compile_error", "add", [("out[idx] = a[idx] + b[idx];", "out[idx] = a[idx] + b_undeclared[idx];")],
         "compile-error"),
        ("add_incorrect", "add", [("out[idx] = a[idx] + b[idx];", "out[idx] = a[idx] - b[idx];")], "incorrect"),
        ("add_slow", "add", [(threads, "const int threads = 64;"), ("65535 * 8", "32")], "slow"),
    ]
    if quick:
        keep = {"add", "gelu", "add_compile_error", "add_incorrect"}
        specs = [s for s in specs if s[0] in keep]
    return [
        BenchCandidate(cid, task, _variant(task, f"kevin_bench_{cid}", edits), expect)
        for cid, task, edits, expect in specs
    ]


def percentile(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: list[float]) -> dict[str, Optional[float]]:
    return {"median": percentile(values, 0.5), "p90": percentile(values, 0.9),
            "min": min(values) if values else None, "max": max(values) if values else None, "n": len(values)}


# -- kevin-agent ---------------------------------------------------------------------------------
def bench_compile(candidates: list[BenchCandidate], cache_dir: Path, arch: str) -> dict[str, Any]:
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    cache = BuildCache(cache_dir, arch=arch)
    codes = [c.code for c in candidates]
    rounds = {}
    for label in ("cold", "hit"):
        started = time.perf_counter()
        outcomes = compile_many(codes, cache)
        wall = time.perf_counter() - started
        per = [sum(r.seconds for r in o.results) for o in outcomes]
        rounds[label] = {
            "wall_s": wall,
            "per_candidate_s": summary(per),
            "ok": [o.ok for o in outcomes],
            "cache_hits": [all(r.cache_hit for r in o.results) for o in outcomes],
            "paths": [sorted({r.path for r in o.results}) for o in outcomes],
            "by_candidate": {c.id: s for c, s in zip(candidates, per)},
        }
    return rounds


def bench_evaluator(candidates: list[BenchCandidate], cache_dir: Path, arch: str,
                    with_torch_compile: bool) -> dict[str, Any]:
    """Every task's batch submitted at once to one evaluator (as runs and editor classes do), from
    an empty candidate cache; baselines measured once per task inside this phase."""
    import threading

    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.task import load_task

    settings = EvalSettings(cache_dir=cache_dir, arch=arch, with_torch_compile=with_torch_compile)
    evaluator = CudaEvaluator(settings)
    rows: dict[str, dict[str, Any]] = {}
    groups = {t: [c for c in candidates if c.task == t] for t in dict.fromkeys(c.task for c in candidates)}
    errors: list[BaseException] = []

    def run_group(task_name: str) -> None:
        try:
            task = load_task(str(FIXTURES / f"{task_name}_task.py"))
            verdicts = evaluator.evaluate(task, [c.code for c in groups[task_name]])
            for cand, verdict in zip(groups[task_name], verdicts):
                rows[cand.id] = _verdict_row(verdict)
        except BaseException as err:  # reported after the phase
            errors.append(err)

    evaluator.check_environment()
    started, started_clock = time.perf_counter(), time.monotonic()
    try:
        threads = [threading.Thread(target=run_group, args=(t,)) for t in groups]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        wall = time.perf_counter() - started
        workers = list(evaluator.last_worker_results)
        baselines = list(evaluator.last_baseline_results)  # measured while the first builds compile
        aheads = list(evaluator.last_ahead_results)  # their torch.compile built before, off the lease
        evaluator.close()
    if errors:
        raise errors[0]
    return {
        "wall_s": wall,
        "breakdown": {**breakdown(workers + baselines, [rows[c.id] for c in candidates if c.id in rows],
                                  started_clock, wall), **ahead_breakdown(aheads, baselines, started_clock)},
        "candidates_per_minute": 60.0 * len(candidates) / wall,
        "worker_start_s": summary([w.startup_s for w in workers if w.startup_s is not None]),
        "visible_wait_s": summary([w.waited_s for w in workers]),
        "gpu_stage_s": summary([w.seconds for w in workers]),
        "gpu_runs": len(workers),
        "baseline_runs": len(baselines),
        "lanes": len(evaluator.lanes) or 1,
        "gpu_name": evaluator.gpu_name,
        "verdicts": {c.id: rows[c.id] for c in candidates if c.id in rows},
    }


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def breakdown(workers: list[Any], rows: list[dict[str, Any]], started: float, wall: float) -> dict[str, Any]:
    """Where the evaluation's wall time went: the GPU's busy and idle time (per lane, jobs on the
    parent's clock), baseline jobs, candidate GPU stages, visible worker starts, and the builds'
    summed seconds (they overlap each other and the GPU). ``first_gpu_job_s``: wall time before
    the GPU had anything to do (the critical path through the first builds and worker start)."""
    jobs = [(w.ended_at - w.seconds - started, w.ended_at - started, w.baseline is not None) for w in workers]
    busy = busy_seconds([(a, b) for a, b, _ in jobs])
    builds = [r["build_s"] for r in rows if r.get("build_s") is not None]
    first = min((a for a, _, _ in jobs), default=None)
    first_candidate = min((a for a, _, base in jobs if not base), default=None)
    last_end = max((b for _, b, _ in jobs), default=None)
    return {
        "first_gpu_job_s": first,
        "first_candidate_job_s": first_candidate,  # later than the first job when a baseline ran first
        "gpu_busy_s": busy, "gpu_idle_s": max(0.0, wall - busy),
        # idle between the first job's start and the last job's end: hand-over gaps, late builds
        "gpu_idle_between_jobs_s": (last_end - first - busy) if first is not None and last_end is not None else 0.0,
        "timeline": [[round(a, 3), round(b, 3)] for a, b, _ in sorted(jobs)],  # each job's span on the wall
        "baseline_jobs_s": sum(b - a for a, b, base in jobs if base),
        "candidate_gpu_stages_s": sum(b - a for a, b, base in jobs if not base),
        "visible_worker_wait_s": sum(w.waited_s for w in workers),
        "builds_summed_s": sum(builds), "builds": len(builds),
        "worker_stage_median_s": stage_medians(rows),
        "baseline_stage_median_s": stage_medians(
            [{"stage_s": w.baseline.stage_seconds} for w in workers if w.baseline is not None]),
    }


def ahead_breakdown(aheads: list[Any], baselines: list[Any], started: float) -> dict[str, Any]:
    """The compile-ahead jobs (torch.compile of each task's reference, built off the GPU's lease
    while the candidates compile): how many, their spans on the wall, how many built, and how many
    baseline jobs then timed it on their worker's own build or loaded it from the caches instead of
    building it under the lease."""
    measured = [b.baseline for b in baselines if b.baseline is not None]
    hits = [b.compile_cache_hit for b in measured]
    return {
        "ahead_jobs": len(aheads),
        "ahead_built": sum(1 for a in aheads if a.compiled_ahead is not None and a.compiled_ahead.ok),
        "ahead_timeline": [[round(a.ended_at - a.seconds - started, 3), round(a.ended_at - started, 3)]
                           for a in sorted(aheads, key=lambda a: a.ended_at)],
        "ahead_job_median_s": statistics.median([a.seconds for a in aheads]) if aheads else None,
        "ahead_errors": sorted({a.compiled_ahead.error if a.compiled_ahead else a.verdict.message[:200]
                                for a in aheads if not (a.compiled_ahead and a.compiled_ahead.ok)}),
        "baseline_compiles_from_cache": sum(1 for hit in hits if hit is True),
        "baseline_compiles_built_ahead": sum(1 for b in measured if b.built_ahead),
        "baseline_compiles": len(hits),
    }


def stage_medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each worker stage's median seconds over the candidates that reached it, in stage order."""
    seen: dict[str, list[float]] = {}
    for row in rows:
        for name, seconds in (row.get("stage_s") or {}).items():
            seen.setdefault(name, []).append(float(seconds))
    return {name: round(statistics.median(values), 3) for name, values in seen.items()}


def render_breakdown(result: dict[str, Any]) -> list[str]:
    """The breakdown as lines (empty when the result has none)."""
    part = result.get("kevin", {}).get("breakdown")
    if not part:
        return []
    wall = result["kevin"]["wall_s"]
    share = lambda seconds: f"{seconds:7.1f} s  {100 * seconds / wall:5.1f}% of the wall" if wall else "-"  # noqa: E731
    lines = ["", f"where the {wall:.1f} s went (one GPU lane unless said):",
             f"  precompiled torch header, before the phase   {_f(result.get('header_s'))}",
             f"  wall before the GPU's first job              {_f(part['first_gpu_job_s'])}",
             f"  wall before the first candidate's GPU stage  {_f(part.get('first_candidate_job_s'))}",
             f"  GPU busy                                     {share(part['gpu_busy_s'])}",
             f"    baseline jobs (eager, torch.compile)       {share(part['baseline_jobs_s'])}",
             f"    candidate GPU stages                       {share(part['candidate_gpu_stages_s'])}",
             f"  GPU idle                                     {share(part['gpu_idle_s'])}",
             f"    between its first and last job             {share(part.get('gpu_idle_between_jobs_s', 0.0))}",
             f"  visible waits for a worker                   {_f(part['visible_worker_wait_s'])}",
             f"  builds ({part['builds']}, summed; they overlap)             {_f(part['builds_summed_s'])}"]
    stages = part.get("worker_stage_median_s") or {}
    if stages:
        lines.append("  worker stages, median s: " + ", ".join(f"{name} {s:.2f}" for name, s in stages.items()))
    parts = part.get("baseline_stage_median_s") or {}
    if parts:
        lines.append("  baseline job parts, median s: " + ", ".join(f"{name} {s:.2f}" for name, s in parts.items()))
    if "ahead_jobs" in part:
        lines.append(f"  torch.compile built ahead, off the lease: {part['ahead_built']} of {part['ahead_jobs']} jobs"
                     f" (median {_f(part['ahead_job_median_s'])}); baseline jobs timing its worker's build:"
                     f" {part.get('baseline_compiles_built_ahead', 0)}, loading it from the caches:"
                     f" {part['baseline_compiles_from_cache']}, of {part['baseline_compiles']}")
        lines += [f"    not built: {error}" for error in part.get("ahead_errors", [])]
    return lines


def _verdict_row(verdict: Any) -> dict[str, Any]:
    d = verdict.details
    return {"stage": verdict.stage.value, "ok": verdict.ok, "correct": verdict.correct,
            "speedup_vs_eager": d.timing.speedup_vs_eager, "speedup_vs_compile": d.timing.speedup_vs_compile,
            "kernel_ms": d.timing.kernel.median_ms if d.timing.kernel else None,
            "kernel_trials": d.timing.kernel.trials if d.timing.kernel else None,
            "build_s": d.build.seconds, "stage_s": dict(d.environment.stage_seconds),
            "message": verdict.message.splitlines()[0]}


def warm_header(cache_dir: Path, arch: str) -> float:
    """Build the shared precompiled torch header (once per torch install) before the timed phase."""
    from kevin_agent.evaluate.build.cache import BuildCache

    started = time.perf_counter()
    BuildCache(cache_dir, arch=arch).warm()
    return time.perf_counter() - started


# -- baseline: stock load_inline, KernelBench-style, sequential and in-process --------------------
def _time_cuda(fn: Any, inputs: list[Any], trials: int, warmup: int = 3) -> list[float]:
    import torch

    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _baseline_one(cand: BenchCandidate, ext_dir: Path, seed: int = 42) -> dict[str, Any]:
    import torch

    os.environ["TORCH_EXTENSIONS_DIR"] = str(ext_dir / cand.id)
    row: dict[str, Any] = {"compile_s": None, "correct": False, "error": None}
    started = time.perf_counter()
    try:
        new_ns: dict[str, Any] = {"__name__": f"bench_{cand.id}"}
        try:
            exec(compile(cand.code, f"<{cand.id}>", "exec"), new_ns)  # load_inline compiles here
        finally:
            row["compile_s"] = time.perf_counter() - started
        ref_ns: dict[str, Any] = {"__name__": f"bench_ref_{cand.id}"}
        exec(compile((FIXTURES / f"{cand.task}_task.py").read_text(), f"<{cand.task}>", "exec"), ref_ns)
        init = ref_ns["get_init_inputs"]()
        torch.manual_seed(seed)
        model = ref_ns["Model"](*init).cuda()
        torch.manual_seed(seed)
        new = new_ns["ModelNew"](*init).cuda()
        with torch.no_grad():
            for trial in range(5):
                torch.manual_seed(seed + trial)
                inputs = [x.cuda() if hasattr(x, "cuda") else x for x in ref_ns["get_inputs"]()]
                expected, got = model(*inputs), new(*inputs)
                torch.cuda.synchronize()
                if expected.shape != got.shape or not torch.allclose(expected, got, atol=1e-2, rtol=1e-2):
                    row["error"] = f"mismatch in trial {trial}"
                    break
            else:
                row["correct"] = True
            if row["correct"]:
                eager = _time_cuda(model, inputs, 100)
                kernel = _time_cuda(new, inputs, 100)
                row["kernel_ms"] = statistics.mean(kernel)
                row["speedup_vs_eager"] = statistics.mean(eager) / statistics.mean(kernel)
    except Exception as err:  # KernelBench records the failure and moves on
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    row["total_s"] = time.perf_counter() - started
    return row


def bench_baseline(candidates: list[BenchCandidate], work: Path, budget_s: float) -> dict[str, Any]:
    """Stock load_inline, one candidate after another; no candidate starts once ``budget_s`` is
    spent (one stock compile takes ~45 s on the H200 host and cannot be interrupted), so the phase
    always ends and says how many it ran."""
    started = time.perf_counter()
    rows, skipped = {}, []
    for cand in candidates:
        if time.perf_counter() - started > budget_s:
            skipped.append(cand.id)
            continue
        rows[cand.id] = _baseline_one(cand, work)
    wall = time.perf_counter() - started
    compiles = [r["compile_s"] for r in rows.values() if r["compile_s"] is not None]
    return {"wall_s": wall, "candidates_per_minute": 60.0 * len(rows) / wall if rows else 0.0,
            "compile_s": summary(compiles), "rows": rows, "skipped": skipped, "budget_s": budget_s}


# -- report --------------------------------------------------------------------------------------
def _f(value: Optional[float], unit: str = "s", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}".strip()


def render(result: dict[str, Any]) -> str:
    k, c, b = result["kevin"], result.get("compile"), result.get("baseline")
    lines = [f"eval bench: {result['n']} candidates on {result['gpu']} (torch {result['torch']}, "
             f"{result['cpus']} CPUs)", ""]
    header = f"{'measure':44} {'kevin-agent':>16} {'stock load_inline':>18}"
    lines += [header, "-" * len(header)]

    def row(name: str, ours: str, theirs: str = "") -> None:
        lines.append(f"{name:44} {ours:>16} {theirs:>18}")

    bc = b["compile_s"] if b else {}
    if c is not None:
        row("cold compile per candidate, median", _f(c["cold"]["per_candidate_s"]["median"]), _f(bc.get("median")))
        row("cold compile per candidate, p90", _f(c["cold"]["per_candidate_s"]["p90"]), _f(bc.get("p90")))
        row("cold compile, whole batch (parallel) wall", _f(c["cold"]["wall_s"]))
        row("cache hit per candidate, median", _f(c["hit"]["per_candidate_s"]["median"], digits=3))
        row("cache hits on second batch", f"{sum(c['hit']['cache_hits'])}/{result['n']}")
    row("worker start (spawn -> READY, hidden), median", _f(k["worker_start_s"]["median"]))
    row("visible wait for a worker, median", _f(k["visible_wait_s"]["median"], digits=3))
    row("GPU stage per candidate, median", _f(k["gpu_stage_s"]["median"]))
    row("GPU stage per candidate, p90", _f(k["gpu_stage_s"]["p90"]))
    row("precompiled torch header (once per install)", _f(result.get("header_s")))
    row("full evaluation wall", _f(k["wall_s"], digits=1), _f(b["wall_s"] if b else None, digits=1))
    row("candidates fully evaluated per minute", f"{k['candidates_per_minute']:.2f}",
        f"{b['candidates_per_minute']:.2f}" if b else "-")
    if b and b.get("skipped"):
        row("stock baseline: candidates not run (budget)", "", str(len(b["skipped"])))
    lines += render_breakdown(result)
    lines += ["", f"{'candidate':20} {'kevin verdict':26} {'speedup':>8} {'build s':>8} {'baseline':>22}"]
    for cid, v in k["verdicts"].items():
        base = (b or {}).get("rows", {}).get(cid)
        if base is None:
            base_text = "-"
        elif base["correct"]:
            base_text = f"correct {base.get('speedup_vs_eager', 0):.2f}x"
        else:
            base_text = (base["error"] or "failed")[:22]
        speed = "-" if v["speedup_vs_eager"] is None else f"{v['speedup_vs_eager']:.2f}x"
        lines.append(f"{cid:20} {v['stage'] + (' ok' if v['ok'] else ' FAIL'):26} {speed:>8} "
                     f"{_f(v['build_s'], ''):>8} {base_text:>22}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 candidates instead of 16")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--baseline", type=int, default=None, metavar="N",
                        help="run the stock baseline on the first N candidates only (0: skip)")
    parser.add_argument("--baseline-budget", type=float, default=150.0, metavar="S",
                        help="start no stock-baseline candidate after this many seconds (default 150)")
    parser.add_argument("--no-torch-compile", action="store_true", help="do not time torch.compile in kevin's runs")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a fresh temporary one)")
    parser.add_argument("--evaluation-only", action="store_true",
                        help="skip phases 1-2 (compile_many cold and cache hit): full evaluation only")
    args = parser.parse_args(argv)

    import torch

    from kevin_agent.evaluate.environment import check_environment, resolve_arch

    info = check_environment(compile_only=False)
    arch = resolve_arch(None, info)
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    candidates = build_candidates(args.quick)
    work = args.work or Path(tempfile.mkdtemp(prefix="kevin-eval-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench: {len(candidates)} candidates, scratch {work}", file=sys.stderr)
    result: dict[str, Any] = {
        "n": len(candidates), "gpu": info.gpu_name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "cpus": os.cpu_count(), "arch": arch,
        "candidates": [{"id": c.id, "task": c.task, "expect": c.expect} for c in candidates],
    }
    def save() -> None:  # after every phase, so a run cut short keeps what it measured
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2, default=str))

    if not args.evaluation_only:
        print("bench: 1-2/4 compile_many cold, then cache hit", file=sys.stderr)
        result["compile"] = bench_compile(candidates, work / "cache-compile", arch)
        save()
    print("bench: 3/4 full evaluation (empty candidate cache; torch header built first)", file=sys.stderr)
    result["header_s"] = warm_header(work / "cache-eval", arch)
    result["kevin"] = bench_evaluator(candidates, work / "cache-eval", arch, not args.no_torch_compile)
    save()
    print(render(result), flush=True)
    limit = len(candidates) if args.baseline is None else args.baseline
    if limit > 0:
        print(f"bench: 4/4 stock load_inline baseline on {limit} candidates", file=sys.stderr)
        result["baseline"] = bench_baseline(candidates[:limit], work / "torch-extensions", args.baseline_budget)
        save()
        print("\n" + render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
