"""Issue 18, the OS side: every attack runs confined and, as a control, unconfined, through the
real entry points, so the OS is shown to be what stops it (no static check is involved):

- ``record``: the load_inline recorder (``build.specs.record_in_child``), a candidate's top level;
- ``compile``: a compile child, ``run_ninja`` confined by ``BuildCache._confinement`` (what every
  build uses), running the attack as the program a build step runs;
- ``worker``: the GPU worker's candidate layer (``worker_policy``) through the launcher, CPU only
  (tests/gpu/test_attacks_gpu.py runs the same bodies in CUDA candidates on the GPU worker).

The batch (last section): ``attacks.BATCHED`` in one child, as tests/gpu/test_attacks_gpu.py
runs them in one GPU worker job, must end every attack as its own run does.

The attack bodies are ``sandbox.attacks.OS_SUITE`` (shared with the GPU tests). The fake home,
repository and run store live in tmp. A ``contained`` attack may run inside and is judged by
what is left afterwards (processes still alive, output that reached the parent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevin_agent.evaluate.sandbox import launch_command, worker_policy
from kevin_agent.evaluate.sandbox.attacks import (
    BATCH_MARKER,
    BATCHED,
    OS_SUITE,
    Attack,
    attack_result,
    attack_script,
    batch_candidate,
    batch_definitions,
    batch_results,
    batch_targets,
    by_name,
    end_batch_lingering,
    end_lingering,
    expected_refusal,
    make_world,
    os_targets,
)
from kevin_agent.evaluate.sandbox.check import _Listener

ENTRIES = ("record", "compile", "worker")


# -- the world outside the sandbox -----------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world = make_world(tmp_path_factory.mktemp("attacks-os"))
    listener = _Listener()
    victim = subprocess.Popen(["/bin/sleep", "900"], stdin=subprocess.DEVNULL)
    yield {**world, "listener": listener, "victim": victim.pid}
    victim.kill()
    victim.wait()
    listener.close()


# -- the entry points ------------------------------------------------------------------------

def run_entry(entry: str, attack: Attack, targets: dict, confined: bool, world: dict, root: Path) -> dict:
    """``attack`` through one candidate-facing child: "record", "compile" or the GPU "worker"."""
    if entry == "record":
        return run_record(attack, targets, confined)
    if entry == "compile":
        return run_compile(attack, targets, confined, root)
    return run_worker(attack, targets, confined, world)


def run_record(attack: Attack, targets: dict, confined: bool) -> dict:
    """The recorder on a candidate whose top level tries ``attack``; the result travels back in
    the recorded load_inline call (or the recorder's error when the sandbox stopped it)."""
    from kevin_agent.evaluate.build.specs import SourceExtractionError, record_in_child

    code = (attack_script(attack, targets) + "from torch.utils.cpp_extension import load_inline\n"
            "load_inline(name='attack', cpp_sources=_json.dumps(_r), functions=['f'])\n")
    try:
        specs = record_in_child(code, timeout_s=200, sandbox="required" if confined else "off")
    except SourceExtractionError as exc:
        return {"result": None, "message": str(exc)}
    return {"result": json.loads("".join(specs[0].cpp_sources)), "message": ""}


def run_compile(attack: Attack, targets: dict, confined: bool, root: Path) -> dict:
    """ninja runs a build step that tries ``attack``, confined as every build is (``BuildCache``)."""
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.ninja_file import run_ninja

    build = Path(targets["scratch"])
    (build / "attack.py").write_text(attack_script(attack, targets))
    (build / "build.ninja").write_text(f"rule attack\n  command = {sys.executable} attack.py && touch $out\n"
                                       "build done: attack\ndefault done\n")
    cache = BuildCache(root / "cache")
    cache.sandbox = "required"
    confine = cache._confinement(build) if confined else None
    ran = run_ninja(build, 1, 300.0, build / "build.log", confine)
    return {"result": attack_result(ran.output), "message": ran.output[-2000:], "output_bytes": len(ran.output),
            "completed": ran.ok and not ran.timed_out}


def worker_child(code: str, scratch: Path, confined: bool, world: dict) -> subprocess.CompletedProcess:
    """``code`` run under the worker's candidate layer (``worker_policy``, CPU only) through the launcher."""
    script = scratch / "attack.py"
    script.write_text(code)
    policy = worker_policy(scratch, gpu=False, protect=[world["repo"]])
    argv = launch_command(policy, ["kevin_agent.evaluate.sandbox.attack_run", str(script)],
                          "required" if confined else "off", module=True)
    env = {**os.environ, "HOME": str(world["home"])}
    return subprocess.run(argv, cwd=scratch, env=env, capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                          start_new_session=True)


def run_worker(attack: Attack, targets: dict, confined: bool, world: dict) -> dict:
    """The worker's candidate layer running ``attack_script``."""
    proc = worker_child(attack_script(attack, targets), Path(targets["scratch"]), confined, world)
    text = proc.stdout.decode(errors="replace")
    return {"result": attack_result(text), "message": proc.stderr.decode(errors="replace")[-2000:],
            "output_bytes": len(proc.stdout)}


def run(entry: str, name: str, confined: bool, world: dict, tmp_path: Path) -> tuple[dict, dict]:
    scratch = tmp_path / ("confined" if confined else "control")
    scratch.mkdir()
    targets = os_targets(world, scratch, world["listener"].port, world["victim"])
    attack = by_name(name)
    before = world["listener"].accepted
    out = run_entry(entry, attack, targets, confined, world, tmp_path)
    time.sleep(0.2)  # a process left behind has had time to start
    out["lingering"] = end_lingering(targets["linger"])
    out["accepted"] = world["listener"].accepted - before
    return out, targets


# -- what each attack gets -------------------------------------------------------------------

def check_confined(entry: str, name: str, out: dict) -> None:
    result = out["result"]
    if name == "output_flood":
        assert result is None, f"the flood was not stopped: {out}"
        assert "printed more than 16 MB and was stopped" in out["message"], out["message"][-500:]
        if entry != "record":
            assert out["output_bytes"] <= 17 * 2**20, out["output_bytes"]
        return
    assert result is not None, f"no result came back: {out['message'][-1500:]}"
    refusal = expected_refusal(by_name(name), processes=entry == "compile")
    if refusal is not None:
        assert not result["ok"] and result["errno"] in refusal, result
    assert out["lingering"] == 0, f"{out['lingering']} processes outlived the {entry} child"


def check_control(name: str, out: dict) -> None:
    """Without the sandbox the attack works: the OS, not the attack's own failure, stops it."""
    if name == "output_flood" and out.get("completed"):
        return  # a build's log keeps only its first 4 MB (the parent's cap): the flood ran to its end
    if name == "output_flood" and out["result"] is None:
        pytest.fail(f"the unconfined flood did not finish: {out['message'][-500:]}")
    assert out["result"] is not None and out["result"]["ok"], out
    if name in ("setsid_linger", "double_fork"):
        assert out["lingering"] >= 1, "the control left nothing behind: the test would prove nothing"
    if name == "output_flood" and "output_bytes" in out:
        assert out["output_bytes"] >= 40 * 2**20


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [a.name for a in OS_SUITE])
@pytest.mark.parametrize("entry", ENTRIES)
def test_os_attack_is_stopped_by_the_sandbox(entry, name, world, tmp_path):
    control, _ = run(entry, name, False, world, tmp_path)
    check_control(name, control)
    home_before = sorted(world["home"].iterdir())
    confined, _ = run(entry, name, True, world, tmp_path)
    check_confined(entry, name, confined)
    assert sorted(world["home"].iterdir()) == home_before
    assert confined["accepted"] == 0 and (name != "tcp_connect" or control["accepted"] == 1)


# -- many attacks in one child: what tests/gpu/test_attacks_gpu.py runs in one GPU worker job ----

TOY = "class ModelNew:\n    def forward(self, *args):\n        return None\n"
PLACES = ("import", "forward")


@pytest.fixture(scope="module")
def batched(world, tmp_path_factory) -> dict:
    """``BATCHED`` in one worker child per (place, confined): the GPU suite's ``batch_candidate``
    around a CPU ModelNew whose forward the script calls; each attack's result, what each left
    behind, the connections the listener took, the child's stderr (where the report is)."""
    runs = {}
    for where in PLACES:
        for confined in (True, False):
            scratch = tmp_path_factory.mktemp(f"batch-{where}-{'confined' if confined else 'control'}")
            targets = batch_targets(world, scratch, world["listener"].port, world["victim"], BATCHED)
            before = world["listener"].accepted
            code = batch_candidate(TOY, BATCHED, targets, where) + "\nModelNew().forward()\n"
            proc = worker_child(code, scratch, confined, world)
            time.sleep(0.2)  # a process left behind has had time to start
            stderr = proc.stderr.decode(errors="replace")
            runs[where, confined] = {"results": batch_results(stderr), "stderr": stderr,
                                     "left": end_batch_lingering(targets),
                                     "accepted": world["listener"].accepted - before}
    return runs


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [a.name for a in BATCHED])
def test_a_batched_attack_gets_what_it_gets_alone(name, batched, world, tmp_path):
    """Each attack of a batch, confined and unconfined, at import and in forward, ends as the same
    attack run alone in its own child (the same ok and errno) and passes the same checks."""
    alone = {confined: run("worker", name, confined, world, tmp_path)[0]["result"] for confined in (False, True)}
    for (where, confined), ran in batched.items():
        assert ran["results"] is not None, f"no report from the {where} batch: {ran['stderr'][-1500:]}"
        got = ran["results"][name]
        out = {"result": got, "message": ran["stderr"][-2000:], "lingering": ran["left"][name]}
        if confined:
            check_confined("worker", name, out)
        else:
            check_control(name, out)
        assert alone[confined] is not None
        assert (got["ok"], got["errno"]) == (alone[confined]["ok"], alone[confined]["errno"]), (where, got, alone)
        if name == "tcp_connect":
            assert ran["accepted"] == (0 if confined else 1), (where, confined, ran["accepted"])


def test_a_batch_report_is_one_short_line(batched):
    """The report travels in one error line, which the GPU worker cuts at 3000 characters."""
    for ran in batched.values():
        lines = [line for line in ran["stderr"].splitlines() if BATCH_MARKER in line]
        assert len(lines) == 1 and len(lines[0]) < 2500, [len(line) for line in lines]
        assert sorted(ran["results"]) == sorted(a.name for a in BATCHED)


def test_batch_reports_that_are_missing_or_cut_read_as_none():
    assert batch_results("Traceback ...\nRuntimeError: boom\n") is None
    assert batch_results("RuntimeError: " + BATCH_MARKER + '{"read_home":{"ok":false,"err') is None
    assert batch_results("x\nRuntimeError: " + BATCH_MARKER + '{"a":{"ok":true}}\n') == {"a": {"ok": True}}
    with pytest.raises(ValueError):
        batch_definitions((Attack("solo", "needs its own thread", "pass", single_threaded=True),), {"solo": {}})
    with pytest.raises(ValueError):
        batch_candidate(TOY, (), {}, "init")
