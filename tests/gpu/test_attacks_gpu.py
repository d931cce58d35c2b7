"""Issue 18's OS attacks against the GPU worker as kevin runs it (``lanes.worker_confinement``:
the launcher's PID namespace and bounds, the start-up layer, then the worker's own candidate
layer), inside a real CUDA candidate at import and inside ``forward``, with an unconfined worker
as the control. The attack bodies and the expected refusals are the ones tests/test_attacks_os.py
runs on the CPU (``sandbox.attacks.OS_SUITE``, ``expected_refusal``).

Nine worker jobs in all, each run once (``Jobs``) and checked attack by attack: the attacks that
end with a refused call (``attacks.BATCHED``) run together in one candidate that reports every
result in its error (``batch_candidate``; tests/test_attacks_os.py checks the batch ends each
attack as a run of its own does), at import and in forward, confined and unconfined (4 jobs);
the attacks that end their process (``attacks.ALONE``: fork bomb, output flood) run alone,
confined, at import and in forward (4 jobs), and the output flood once unconfined (the fork bomb
never is). The candidate is built into the provenance module's persistent cache, whose torch
header is built by the time this module runs (scripts/gpu_session.sh part 1).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import correct_candidate, log_record, persistent_cache_root, run_job, task_source

from kevin_agent.data import Stage
from kevin_agent.evaluate.sandbox.attacks import (
    ALONE,
    BATCHED,
    batch_candidate,
    batch_results,
    batch_targets,
    by_name,
    end_batch_lingering,
    expected_refusal,
    make_world,
)
from kevin_agent.evaluate.sandbox.check import _Listener

pytestmark = pytest.mark.gpu

JOB = {"with_torch_compile": False, "timing_trials": 5, "warmup_trials": 1}
PLACES = ("import", "forward")
BATCH = "batch"
LIMIT = "your code printed more than 16 MB and was stopped"


@pytest.fixture(scope="module")
def attack_cache(device_arch):
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    root = persistent_cache_root()
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


class Jobs:
    """Each (attacks, place, sandbox) job run once, on first asking: its verdict, every attack's
    reported result (None: no report came back), what each attack left running, connections."""

    def __init__(self, pools: tuple[Any, Any], cache: Path, world: dict, scratch: Path) -> None:
        self.pools, self.cache, self.world, self.scratch = pools, cache, world, scratch
        self.done: dict[tuple[str, str, str], dict] = {}

    def get(self, which: str, where: str, sandbox: str) -> dict:
        key = (which, where, sandbox)
        if key not in self.done:
            self.done[key] = self._run(which, where, sandbox)
        return self.done[key]

    def _run(self, which: str, where: str, sandbox: str) -> dict:
        attacks = BATCHED if which == BATCH else (by_name(which),)
        world = self.world
        targets = batch_targets(world, self.scratch, world["listener"].port, world["victim"], attacks)
        source = batch_candidate(correct_candidate("add"), attacks, targets, where)
        before = world["listener"].accepted
        pool = self.pools[0] if sandbox == "off" else self.pools[1]
        result = run_job(pool, self.cache, task_source("add"), source, f"attacks/{sandbox}/{which}/{where}",
                         sandbox=sandbox, **JOB)
        time.sleep(0.2)  # a process left behind has had time to start
        verdict = result.verdict
        ran = {"verdict": verdict, "results": batch_results(verdict.message), "left": end_batch_lingering(targets),
               "accepted": world["listener"].accepted - before, "stderr": result.stderr_tail[-800:]}
        log_record({"event": "os-attack", "attacks": which, "where": where, "sandbox": sandbox,
                    "stage": str(verdict.stage), "results": ran["results"], "left": ran["left"],
                    "accepted": ran["accepted"], "message": verdict.message[-600:]})
        return ran


@pytest.fixture(scope="module")
def jobs(attack_cache, world, tmp_path_factory):
    """The jobs on (unconfined, confined) worker pools, the confined one exactly as ``LocalLane``
    builds it."""
    from kevin_agent.evaluate.isolation import WorkerPool
    from kevin_agent.evaluate.lanes import granted_devices_env, worker_confinement

    env = {"CUDA_CACHE_PATH": str(attack_cache / "cuda-jit"), **granted_devices_env()}
    with WorkerPool(run_timeout_s=300.0, spares=1) as plain, \
            WorkerPool(run_timeout_s=300.0, spares=1, extra_env=env,
                       confine=worker_confinement("required", attack_cache)) as boxed:
        yield Jobs((plain, boxed), attack_cache, world, tmp_path_factory.mktemp("attacks-gpu-scratch"))


def reported(ran: dict, name: str) -> dict:
    """``name``'s result in a job's report; fails with the verdict when no report came back."""
    verdict = ran["verdict"]
    assert ran["results"] is not None, ("no report", verdict.stage, verdict.message[-800:], ran["stderr"])
    return dict(ran["results"][name])


@pytest.mark.timeout(360)
@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("name", [a.name for a in BATCHED] + list(ALONE))
def test_os_attack_in_a_cuda_candidate_is_stopped(jobs, name, where):
    ran = jobs.get(BATCH if name not in ALONE else name, where, "required")
    verdict = ran["verdict"]
    assert not verdict.ok, verdict.message
    assert ran["left"][name] == 0, f"{ran['left'][name]} processes outlived the worker"
    if name == "tcp_connect":
        assert ran["accepted"] == 0, "the listener on 127.0.0.1 took a connection"
    if name == "output_flood":
        assert LIMIT in verdict.message and ran["results"] is None, verdict.message[-800:]
        return
    assert verdict.stage == Stage.LOAD, (verdict.stage, verdict.message[-800:], ran["stderr"])
    result = reported(ran, name)
    refusal = expected_refusal(by_name(name), processes=False)
    assert refusal is not None and not result["ok"] and result["errno"] in refusal, (where, result)


@pytest.mark.timeout(360)
@pytest.mark.parametrize("where,name", [(w, a.name) for w in PLACES for a in BATCHED] + [("import", "output_flood")])
def test_os_attack_works_in_an_unconfined_worker(jobs, name, where):
    """The control: without the sandbox the same candidate gets through (so the sandbox is what
    stops it above). The fork bomb is left out on the GPU host."""
    ran = jobs.get(BATCH if name not in ALONE else name, where, "off")
    result = reported(ran, name)
    refusal = expected_refusal(by_name(name), processes=False) or ()
    assert result["ok"] or result["errno"] not in refusal, (where, result)
    if name in ("setsid_linger", "double_fork"):
        assert ran["left"][name] >= 1, "the unconfined control left no process behind"
    if name == "tcp_connect":
        assert ran["accepted"] == 1, ran["accepted"]
    if name == "output_flood":
        assert result["ok"] and "printed more than" not in ran["verdict"].message, ran["verdict"].message[-800:]
