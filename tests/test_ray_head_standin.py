"""The CPU stand-in of tests/gpu/test_ray_gpu.py: the same flow (a Ray head started by
``ray_head.ray_head`` with its node cache given, ``ray_evaluator`` on it, one candidate compiled by
a Ray task and judged on the node's "GPU") with the GPU stage and nvcc stood in by
tests/workers/ray_standin.py and ray_fixtures.fake_compile, as in tests/test_ray_lanes.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ray_cluster import RAY_AUTH_MODE, ROOT
from ray_head import NODE, ray_head

from kevin_agent.data import Stage, Task

KERNELS = ROOT / "tests" / "fixtures" / "kernels"
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "ray_standin.py")]


@pytest.mark.timeout(600)  # a guard: ~20 s here, mostly the head's start and the connection
def test_a_candidate_is_judged_through_a_local_ray_head_on_its_node(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.ray_lanes import ray_evaluator

    monkeypatch.setenv("RAY_AUTH_MODE", RAY_AUTH_MODE)
    task = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
    code = (KERNELS / "add_candidate.py").read_text() + "# standin: normal\n"
    node_cache = tmp_path / "node-cache"
    with ray_head(node_cache, pythonpath=[str(ROOT / "tests")]) as address:
        settings = EvalSettings(arch="9.0", cluster=address, cache_dir=tmp_path / "driver-cache", run_timeout_s=60)
        evaluator = ray_evaluator(settings, CudaEvaluator, worker_command=STANDIN,
                                  compile_function="ray_fixtures:fake_compile")
        try:
            evaluator.check_environment()
            lanes = [lane.name for lane in evaluator.lanes]
            verdict = evaluator.evaluate(task, [code])[0]
            compiled_on = dict(evaluator.compiler.nodes)
        finally:
            evaluator.close()
            ray.shutdown()
    assert lanes == [f"ray:{NODE}/cuda:0"] and compiled_on == {NODE: 1}
    assert verdict.stage is Stage.TIMING and verdict.ok, verdict.message
    seen = json.loads(verdict.message)  # the stand-in says where it ran and which cache it read
    assert seen["node"] == NODE and seen["cache_dir"] == str(node_cache)
    assert verdict.details.environment.lane == f"ray:{NODE}/cuda:0"
    assert (tmp_path / "driver-cache" / "ext").is_dir()
