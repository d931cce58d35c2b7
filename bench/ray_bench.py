"""Throughput of the Ray lanes with N simulated GPUs (N = 1, 2, 4) and the per-job Ray overhead.

For each N it starts a real local Ray cluster (``tests/ray_cluster.py``: a head with one CPU and a
node declaring N GPUs and one CPU), opens the Ray evaluator (``--cluster``) with the test seams
(a stand-in GPU worker whose GPU stage sleeps ``--gpu-s`` seconds, a fake compile of ``--compile-s``
seconds that writes a real cache entry), evaluates ``--candidates`` candidates, and reports
  - candidates per minute (wall time of the batch, after the lanes are up);
  - per GPU job: the client's wall time in ``RayLane.run`` against the node's own time (waiting for
    a ready worker + the worker process from job handover to its end): the difference is what Ray
    adds (actor call, packed entries out, result back, polling);
  - per compile: the client's wall time against the fake compile's own time on the node;
  - the same batch through local lanes (``CudaEvaluator`` with N fake devices and the same
    stand-in), for comparison.
Nothing here needs a GPU or nvcc. ``--out FILE`` writes JSON.

    python bench/ray_bench.py [--lanes 1 2 4] [--candidates 32] [--gpu-s 1.0] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from ray_cluster import LocalCluster  # noqa: E402

from kevin_agent.data import Task  # noqa: E402
from kevin_agent.evaluate.api import EvalSettings  # noqa: E402
from kevin_agent.evaluate.evaluator import CudaEvaluator  # noqa: E402
from kevin_agent.evaluate.lanes import DeviceInfo  # noqa: E402

KERNELS = ROOT / "tests" / "fixtures" / "kernels"
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "ray_standin.py")]


def codes(count: int, gpu_s: float, compile_s: float, tag: str) -> list[str]:
    good = (KERNELS / "add_candidate.py").read_text().rstrip("\n")
    return [f"{good}\n# standin: sleep {gpu_s}\n# fake-compile: {compile_s}\n# bench {tag} {i}\n"
            for i in range(count)]


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"median_ms": round(1000 * statistics.median(ordered), 1),
            "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 1)}


class Timings:
    """Wraps ``RayLane.run`` and ``RemoteCompiler.__call__`` to time each call on the client."""

    def __init__(self) -> None:
        self.jobs: list[tuple[float, float]] = []  # (client wall, node-side waited + worker seconds)
        self.compiles: list[float] = []  # client wall per compile

    def install(self) -> None:
        from kevin_agent.evaluate.ray_lanes import RayLane, RemoteCompiler

        run, call = RayLane.run, RemoteCompiler.__call__

        def timed_run(lane: Any, job: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            result = run(lane, job, **kwargs)
            if job.candidate_source:
                self.jobs.append((time.monotonic() - started, result.waited_s + result.seconds))
            return result

        def timed_call(compiler: Any, code: str, cache: Any, cancel: Any = None) -> Any:
            started = time.monotonic()
            outcome = call(compiler, code, cache, cancel)
            self.compiles.append(time.monotonic() - started)
            return outcome

        # instrumentation: the bench times every lane run and remote compile through these wrappers
        RayLane.run = timed_run  # type: ignore[method-assign, assignment]  # looser signature, same call
        RemoteCompiler.__call__ = timed_call  # type: ignore[method-assign, assignment]  # as above


def ray_round(lanes: int, args: argparse.Namespace, timings: Timings) -> dict[str, Any]:
    from kevin_agent.evaluate.ray_lanes import ray_evaluator

    with LocalCluster() as cluster:
        cluster.start(num_cpus=1)
        cluster.add_node("gpu", num_cpus=1, num_gpus=lanes)
        settings = EvalSettings(arch="9.0", cluster=cluster.address, cache_dir=cluster.root / "client",
                                run_timeout_s=120)
        evaluator = ray_evaluator(settings, CudaEvaluator, worker_command=STANDIN,
                                  compile_function="ray_fixtures:fake_compile")
        try:
            evaluator.check_environment()
            evaluator.evaluate(TASK, codes(1, 0.0, 0.0, f"warm{lanes}"))  # baseline measured, lanes warm
            timings.jobs.clear()
            timings.compiles.clear()
            started = time.monotonic()
            verdicts = evaluator.evaluate(TASK, codes(args.candidates, args.gpu_s, args.compile_s, f"n{lanes}"))
            wall = time.monotonic() - started
        finally:
            evaluator.close()
            import ray

            ray.shutdown()
    assert all(v.ok for v in verdicts), [v.message for v in verdicts if not v.ok]
    overhead = [wall_s - node_s for wall_s, node_s in timings.jobs]
    return {"lanes": lanes, "candidates": len(verdicts), "wall_s": round(wall, 2),
            "per_min": round(60 * len(verdicts) / wall, 1),
            "gpu_job_client": _ms([w for w, _ in timings.jobs]), "gpu_job_node": _ms([n for _, n in timings.jobs]),
            "gpu_job_ray_overhead": _ms(overhead),
            "compile_client": _ms(timings.compiles),
            "compile_overhead": _ms([c - args.compile_s for c in timings.compiles])}


def local_round(lanes: int, args: argparse.Namespace) -> dict[str, Any]:
    """The same batch through local lanes (fake devices, same stand-in, the fake compile here)."""
    import tempfile

    from ray_fixtures import fake_compile

    devices = [DeviceInfo("stand-in", f"bench-local-{i}", i) for i in range(lanes)]
    with tempfile.TemporaryDirectory() as cache:
        settings = EvalSettings(arch="9.0", cache_dir=Path(cache), run_timeout_s=120)
        def compiler(code: str, cache: Any, cancel: Any) -> Any:  # a local compiler's signature
            return fake_compile(code, cache)

        with CudaEvaluator(settings, worker_command=STANDIN, devices=devices, compiler=compiler,
                           jobs=2, spares=1) as evaluator:
            evaluator.evaluate(TASK, codes(1, 0.0, 0.0, f"lwarm{lanes}"))
            started = time.monotonic()
            verdicts = evaluator.evaluate(TASK, codes(args.candidates, args.gpu_s, args.compile_s, f"l{lanes}"))
            wall = time.monotonic() - started
    return {"lanes": lanes, "wall_s": round(wall, 2), "per_min": round(60 * len(verdicts) / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--gpu-s", type=float, default=1.0, help="the stand-in GPU stage per candidate")
    parser.add_argument("--compile-s", type=float, default=0.2, help="the fake compile per candidate")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    timings = Timings()
    timings.install()
    results: dict[str, Any] = {"settings": vars(args) | {"out": str(args.out)}, "ray": [], "local": []}
    for lanes in args.lanes:
        results["ray"].append(ray_round(lanes, args, timings))
        results["local"].append(local_round(lanes, args))
        print(json.dumps({"ray": results["ray"][-1], "local": results["local"][-1]}), flush=True)
    print(f"{'N':>2} {'ray cand/min':>12} {'local cand/min':>14} {'GPU job client ms':>18} "
          f"{'node ms':>8} {'Ray overhead ms (median/p90)':>29} {'compile overhead ms':>20}")
    for ray_row, local_row in zip(results["ray"], results["local"]):
        over, comp = ray_row["gpu_job_ray_overhead"], ray_row["compile_overhead"]
        print(f"{ray_row['lanes']:>2} {ray_row['per_min']:>12} {local_row['per_min']:>14} "
              f"{ray_row['gpu_job_client'].get('median_ms', '-'):>18} "
              f"{ray_row['gpu_job_node'].get('median_ms', '-'):>8} "
              f"{over.get('median_ms', '-'):>14} / {over.get('p90_ms', '-'):<12} {comp.get('median_ms', '-'):>20}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
