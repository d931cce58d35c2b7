"""Build-side provenance through the real evaluator on a GPU (issue 40): an answer whose extension
reaches past its kernels (Python C API, the loader, mprotect, syscalls, /proc/self/mem, host
assembly, an ATen registration) is rejected by provenance before any GPU stage, under both
policies; its honest twin (same kernel, same headers) is correct and timed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpu_helpers import REPO, log_record

from kevin_agent.data import Stage, Task
from kevin_agent.eval_modes import Policy

pytestmark = pytest.mark.gpu

HERE = REPO / "tests" / "fixtures" / "provenance_build"
sys.path.insert(0, str(REPO / "tests"))


@pytest.mark.timeout(400)
@pytest.mark.parametrize("policy", ["strict", "partial"])
def test_native_reach_is_rejected_before_the_gpu_and_its_twin_runs(gpu_cache_dir: Path, policy: Policy):
    from test_build_provenance import honest_twin

    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.evaluator import CudaEvaluator

    task = Task(source=(HERE / "scale_task.py").read_text(), class_name="Model")
    attack = (HERE / "native_reach.py").read_text()
    settings = EvalSettings(cache_dir=gpu_cache_dir, with_torch_compile=False, policy=policy)
    with CudaEvaluator(settings) as evaluator:
        evaluator.check_environment()
        rejected, twin = evaluator.evaluate(task, [attack, honest_twin(attack)])
    log_record({"event": "build-provenance", "policy": policy, "rejected": rejected.message[:2000],
                "twin": [twin.stage.value, twin.ok, twin.message[:500]]})
    assert (rejected.stage, rejected.ok) == (Stage.PROVENANCE, False), rejected.message
    assert "before it ran" in rejected.message and "PyEval_GetFrame" in rejected.message
    assert rejected.details.timing.kernel is None and rejected.details.correctness.max_abs_error is None
    assert (twin.stage, twin.ok) == (Stage.TIMING, True), twin.message
