"""``--cluster`` on a real GPU: a local Ray head started on the GPU host (one node declaring one
GPU) and the real ``RayEvaluator`` with the real worker. A fixture candidate is compiled by a Ray
task (a cache hit: the node's build cache is the session's, where conftest.py built it), its build
travels to the GPU actor, and a fresh confined worker process on that node judges it on the GPU:
correctness, provenance and timing, as locally.

The CPU suite tests the same path on a local CPU cluster with a stand-in GPU stage
(tests/test_ray_lanes.py); this is the one run of the real GPU stage through Ray. The GPU host has
no Ray: scripts/fetch_gpu_wheels.sh puts a trimmed wheel (and what Ray's core needs there) in .whl/,
which scripts/gpu_session.sh installs. Without Ray the test skips. It takes ~30-60 s (head start,
connection, actor start, one candidate). The same flow with a stand-in GPU stage runs on CPU in
tests/test_ray_head_standin.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from gpu_helpers import KERNELS, correct_candidate, log_record
from ray_cluster import RAY_AUTH_MODE
from ray_head import NODE, ray_head

from kevin_agent.data import Stage, Task


@pytest.mark.gpu
@pytest.mark.timeout(240)  # a guard; conftest's session cache may be built inside it when run alone
def test_a_candidate_is_judged_on_the_gpu_through_a_local_ray_head(gpu_cache_dir: Path, device_arch: str,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    import torch

    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.ray_lanes import ray_evaluator

    monkeypatch.setenv("RAY_AUTH_MODE", RAY_AUTH_MODE)  # the driver: see ray_cluster.RAY_AUTH_MODE
    task = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
    started = time.monotonic()
    with ray_head(gpu_cache_dir) as address:
        settings = EvalSettings(arch=device_arch, cluster=address, cache_dir=tmp_path / "driver-cache",
                                timing_trials=30, warmup_trials=3, with_torch_compile=False, run_timeout_s=120)
        evaluator = ray_evaluator(settings, CudaEvaluator)
        try:
            evaluator.check_environment()
            lanes = [lane.name for lane in evaluator.lanes]
            verdict = evaluator.evaluate(task, [correct_candidate("add")])[0]
            compiled_on = dict(evaluator.compiler.nodes)
        finally:
            evaluator.close()
            ray.shutdown()
    seconds = time.monotonic() - started
    log_record({"event": "ray_gpu", "seconds": round(seconds, 2), "lanes": lanes, "stage": verdict.stage.value,
                "ok": verdict.ok, "message": verdict.message[:500]})
    assert lanes == [f"ray:{NODE}/cuda:0"]
    assert compiled_on == {NODE: 1}  # a Ray task on the head built it (a hit in the session's cache)
    assert verdict.stage is Stage.TIMING and verdict.ok, verdict.message
    where = verdict.details.environment
    assert where.lane == f"ray:{NODE}/cuda:0" and where.gpu_name == torch.cuda.get_device_name(0)
    timing = verdict.details.timing
    assert timing is not None and timing.speedup_vs_eager is not None and timing.speedup_vs_eager > 0
    assert (tmp_path / "driver-cache" / "ext").is_dir()  # the build travelled back to the driver's cache
