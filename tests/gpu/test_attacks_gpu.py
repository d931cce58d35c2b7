"""Issue 18's OS attacks against the GPU worker as kevin runs it (``lanes.worker_confinement``:
the launcher's PID namespace and bounds, the start-up layer, then the worker's own candidate
layer), inside a real CUDA candidate at import and inside ``forward``; each attack also runs in
an unconfined worker as the control. The attack bodies and the expected refusals are the ones
tests/test_attacks_os.py runs on the CPU (``sandbox.attacks.OS_SUITE``, ``expected_refusal``).
"""

from __future__ import annotations

import subprocess
import time

import pytest
from gpu_helpers import correct_candidate, log_record, run_job, task_source

from kevin_agent.data import Stage
from kevin_agent.evaluate.sandbox.attacks import (
    OS_SUITE,
    PRELUDE,
    by_name,
    end_lingering,
    expected_refusal,
    make_world,
    os_targets,
)
from kevin_agent.evaluate.sandbox.check import _Listener

pytestmark = pytest.mark.gpu

JOB = {"with_torch_compile": False, "timing_trials": 5, "warmup_trials": 1}


def with_attack(source: str, code: str, where: str, targets: dict) -> str:
    """The candidate ``source`` trying ``code`` at import or first thing in ``forward``."""
    head = PRELUDE + f"\nT = {targets!r}\n"
    if where == "import":
        return head + code + "\n" + source
    return (head + source + "\n_kevin_forward = ModelNew.forward\n"
            "def _attacking_forward(self, *args):\n    " + code + "\n    return _kevin_forward(self, *args)\n"
            "ModelNew.forward = _attacking_forward\n")


@pytest.fixture(scope="module")
def attack_cache(tmp_path_factory, device_arch):
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    root = tmp_path_factory.mktemp("kevin-attack-cache")
    outcomes = compile_many([correct_candidate("add")], BuildCache(root, arch=device_arch))
    assert all(o.ok for o in outcomes), [o.message[:1500] for o in outcomes]
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    listener = _Listener()
    victim = subprocess.Popen(["/bin/sleep", "900"], stdin=subprocess.DEVNULL)
    yield {**make_world(tmp_path_factory.mktemp("attacks-gpu")), "listener": listener, "victim": victim.pid}
    victim.kill()
    victim.wait()
    listener.close()


@pytest.fixture(scope="module")
def pools(attack_cache):
    """(unconfined, confined) worker pools, the confined one exactly as ``LocalLane`` builds it."""
    from kevin_agent.evaluate.isolation import WorkerPool
    from kevin_agent.evaluate.lanes import granted_devices_env, worker_confinement

    env = {"CUDA_CACHE_PATH": str(attack_cache / "cuda-jit"), **granted_devices_env()}
    with WorkerPool(run_timeout_s=300.0, spares=1) as plain, \
            WorkerPool(run_timeout_s=300.0, spares=1, extra_env=env,
                       confine=worker_confinement("required", attack_cache)) as boxed:
        yield plain, boxed


def run_attack(pool, cache, world, name: str, where: str, sandbox: str, tmp_path) -> tuple:
    targets = os_targets(world, tmp_path, world["listener"].port, world["victim"])
    source = with_attack(correct_candidate("add"), by_name(name).code, where, targets)
    before = world["listener"].accepted
    result = run_job(pool, cache, task_source("add"), source, f"attacks/{sandbox}/{name}/{where}",
                     sandbox=sandbox, **JOB)
    time.sleep(0.2)
    left = end_lingering(targets["linger"])
    return result, left, world["listener"].accepted - before


@pytest.mark.timeout(900)
@pytest.mark.parametrize("where", ("import", "forward"))
@pytest.mark.parametrize("name", [a.name for a in OS_SUITE])
def test_os_attack_in_a_cuda_candidate_is_stopped(pools, attack_cache, world, name, where, tmp_path):
    _, boxed = pools
    result, left, accepted = run_attack(boxed, attack_cache, world, name, where, "required", tmp_path)
    verdict = result.verdict
    log_record({"event": "os-attack", "name": name, "where": where, "stage": str(verdict.stage),
                "message": verdict.message[-600:], "left": left})
    assert left == 0 and accepted == 0
    assert not verdict.ok, verdict.message
    refusal = expected_refusal(by_name(name), processes=False)
    if name == "output_flood":
        assert "your code printed more than 16 MB and was stopped" in verdict.message, verdict.message[-800:]
    else:
        assert verdict.stage == Stage.LOAD, (verdict.stage, verdict.message[-800:], result.stderr_tail)
        assert refusal is not None and any(f"[Errno {n}]" in verdict.message for n in refusal), verdict.message


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [a.name for a in OS_SUITE if a.name != "fork_bomb"])
def test_os_attack_works_in_an_unconfined_worker(pools, attack_cache, world, name, tmp_path):
    """The control: without the sandbox the same candidate gets through (so the sandbox is
    what stops it above). The fork bomb is left out on the GPU host."""
    plain, _ = pools
    result, left, _ = run_attack(plain, attack_cache, world, name, "import", "off", tmp_path)
    verdict = result.verdict
    log_record({"event": "os-attack-control", "name": name, "stage": str(verdict.stage),
                "message": verdict.message[-300:], "left": left})
    refusal = expected_refusal(by_name(name), processes=False) or ()
    assert not any(f"[Errno {n}]" in verdict.message for n in refusal), verdict.message
    if name in ("setsid_linger", "double_fork"):
        assert left >= 1, "the unconfined control left no process behind"
    if name == "output_flood":
        assert "printed more than" not in verdict.message
