"""Two evaluator processes started at once on one GPU: their GPU stages take turns under the lease
(the second waits, naming the first), both verdicts are correct and neither timing is flagged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import log_record

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "fixtures" / "kernels"

EVALUATE = """
import json, sys, time
from pathlib import Path
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.task import load_task
task = load_task(sys.argv[1])
code = Path(sys.argv[2]).read_text()
waits = []
with CudaEvaluator(EvalSettings(cache_dir=Path(sys.argv[3]), with_torch_compile=False)) as evaluator:
    evaluator.check_environment()
    started = time.time()
    (verdict,) = evaluator.evaluate(task, [code], on_wait=waits.append)
print(json.dumps({"verdict": verdict.to_dict(), "waits": waits, "started": started, "ended": time.time(),
                  "pid": __import__("os").getpid()}))
"""


def test_two_evaluators_on_one_gpu_take_turns(tmp_path, gpu_cache_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEVIN_LEASE_DIR": str(tmp_path / "leases")}
    args = [str(KERNELS / "matmul_task.py"), str(KERNELS / "matmul_candidate.py"), str(gpu_cache_dir)]
    procs = [subprocess.Popen([sys.executable, "-c", EVALUATE, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    log_record({"event": "lease", "results": [{k: r[k] for k in ("waits", "started", "ended", "pid")}
                                              for r in results]})
    for result in results:
        verdict = result["verdict"]
        assert verdict["stage"] == "timing" and verdict["ok"], verdict["message"]
        assert not verdict["details"]["trust"]["suspicious"], verdict["details"]["trust"]["reasons"]
    waited = [r for r in results if r["waits"]]
    assert waited, "neither evaluator waited for the GPU"
    other = {r["pid"] for r in results} - {waited[0]["pid"]}
    assert any(f"pid {pid}" in message for message in waited[0]["waits"] for pid in other)
