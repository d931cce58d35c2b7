"""Two evaluator processes started at once on one GPU: their GPU stages take turns under the lease
(the second waits, naming the first), both verdicts are correct and neither timing is flagged.

The test holds the GPU's lease itself until both evaluators wait on it, so that their GPU stages
meet however fast each build and worker start is (at ea40f9b, with GPU stages of ~1 s, two
evaluators started together missed each other and neither waited). The task's baseline is
measured first, by one evaluator alone: an evaluator that finds another process measuring it
waits on the baseline's lock, which says nothing to ``on_wait`` (at 7abd669 the second evaluator
sat there, behind the first, which sat behind the test's lease, until the test's timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
def heard(message):
    waits.append(message)
    with open(sys.argv[4], "a") as told:
        told.write(message + "\\n")
with CudaEvaluator(EvalSettings(cache_dir=Path(sys.argv[3]), with_torch_compile=False)) as evaluator:
    evaluator.check_environment()
    started = time.time()
    (verdict,) = evaluator.evaluate(task, [code], on_wait=heard)
print(json.dumps({"verdict": verdict.to_dict(), "waits": waits, "started": started, "ended": time.time(),
                  "pid": __import__("os").getpid()}))
"""


def _wait_until_both_wait(procs: list[subprocess.Popen], heard: list[Path]) -> None:
    """Until each evaluator has said that it waits (or one has ended: its output says why)."""
    while not all(path.exists() and path.read_text().strip() for path in heard):
        if any(p.poll() is not None for p in procs):
            return
        time.sleep(0.1)


def test_two_evaluators_on_one_gpu_take_turns(tmp_path, gpu_cache_dir):
    from kevin_agent.evaluate.lanes import local_devices
    from kevin_agent.evaluate.lease import GpuLease

    leases = tmp_path / "leases"
    leases.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEVIN_LEASE_DIR": str(leases)}
    args = [str(KERNELS / "matmul_task.py"), str(KERNELS / "matmul_candidate.py"), str(gpu_cache_dir)]
    alone = subprocess.run([sys.executable, "-c", EVALUATE, *args, str(tmp_path / "heard-alone.txt")],
                           capture_output=True, text=True, env=env, timeout=200)
    assert alone.returncode == 0, alone.stderr[-2000:]  # the baseline is stored, the candidate built
    device = local_devices()[0]
    blocker = GpuLease(device.uuid, device.label, leases)
    assert blocker.try_acquire()
    heard = [tmp_path / f"heard-{i}.txt" for i in range(2)]
    try:
        procs = [subprocess.Popen([sys.executable, "-c", EVALUATE, *args, str(path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for path in heard]
        _wait_until_both_wait(procs, heard)
    finally:
        blocker.release()
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    log_record({"event": "lease", "results": [{k: r[k] for k in ("waits", "started", "ended", "pid")}
                                              for r in results]})
    for result in results:
        verdict = result["verdict"]
        assert verdict["stage"] == "timing" and verdict["ok"], verdict["message"]
        assert not verdict["details"]["trust"]["suspicious"], verdict["details"]["trust"]["reasons"]
        assert result["waits"] and f"pid {os.getpid()}" in result["waits"][0], result["waits"]
    first, second = results
    took_turns = [r for r, other in ((first, second), (second, first))
                  if any(f"pid {other['pid']}" in message for message in r["waits"])]
    assert took_turns, f"neither evaluator waited for the other: {[r['waits'] for r in results]}"
