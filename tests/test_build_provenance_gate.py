"""The evaluator decides build-side provenance in the parent, before any GPU stage: a compiled
candidate whose stored facts the policy rejects is settled as a PROVENANCE verdict and never
reaches a lane; the same candidate with clean facts goes on to the (stand-in) worker."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from kevin_agent.data import Stage, Task
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.build.cache import BuildResult
from kevin_agent.evaluate.build.compile import CompileOutcome
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.evaluate.lanes import DeviceInfo

ROOT = Path(__file__).resolve().parents[1]
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "standin.py")]
TASK = Task(source=(ROOT / "tests" / "fixtures" / "kernels" / "add_task.py").read_text(), class_name="Model")
GOOD = (ROOT / "tests" / "fixtures" / "kernels" / "add_candidate.py").read_text() + "\n# standin: normal\n"


def _facts(*imports: str) -> dict[str, Any]:
    return {"kernels": ["elementwise_add_kernel"], "imports": {"host.o": list(imports)}, "host_asm": [],
            "exec_data": [], "notes": []}


def test_a_build_the_policy_rejects_never_reaches_a_lane(tmp_path):
    built: dict[str, dict[str, Any]] = {GOOD: _facts("cudaLaunchKernel", "dlsym"),
                                        GOOD + "\n": _facts("cudaLaunchKernel")}

    def compiler(code: str, cache: Any, cancel: threading.Event) -> CompileOutcome:
        result = BuildResult(True, 0.1, True, None, None, "split", None, key="", facts=built[code],
                             kernels={"kernels": ["_Z22elementwise_add_kernelPKfS0_Pfl"]})
        return CompileOutcome(True, "", [result])

    device = DeviceInfo("stand-in", "GPU-gate-test", 0, cuda_version="13.0")
    settings = EvalSettings(cache_dir=tmp_path / "cache", run_timeout_s=60, with_torch_compile=False)
    evaluator = CudaEvaluator(settings, worker_command=STANDIN, devices=[device], spares=0, compiler=compiler, jobs=2)
    evaluator._arch = "9.0"
    with evaluator:
        rejected, control = evaluator.evaluate(TASK, [GOOD, GOOD + "\n"])
    assert (rejected.stage, rejected.ok) == (Stage.PROVENANCE, False)
    assert "dynamic loading: dlsym (host.o)" in rejected.message and "before it ran" in rejected.message
    assert rejected.details.provenance.ok is False and rejected.details.provenance.policy == "strict"
    assert rejected.details.timing.kernel is None and rejected.details.correctness.max_abs_error is None
    assert control.stage == Stage.TIMING, control.message  # the same answer with clean facts runs
