"""The sandbox on a GPU host: the self-check passes with the GPU's device nodes in the policy,
correct kernels pass in a confined worker with unchanged timing, and attacks inside real CUDA
candidates (at import and inside forward) are stopped, the verdict naming the refusal.

The confined workers are started as a GPU lane starts them (``lanes.worker_confinement``: the
start-up layer from the first instruction; the worker adds the candidate layer itself right before
the candidate's first line); the plain ones run with ``sandbox="off"``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from gpu_helpers import REPO, correct_candidate, log_record, run_job, task_source

from kevin_agent.data import Stage
from kevin_agent.evaluate.sandbox.attacks import PRELUDE, by_name, expected_refusal
from kevin_agent.evaluate.sandbox.check import _Listener

pytestmark = pytest.mark.gpu

TIMED = {"with_torch_compile": False, "timing_trials": 60, "warmup_trials": 5}
ATTACKS = ("read_home", "write_repo", "list_repo", "tcp_connect", "spawn_shell", "raise_nofile")
# How a refusal reads when the CPU attack suite has no errno for the attack (spawn, rlimits).
REFUSALS = ("PermissionError: [Errno 13]", "PermissionError: [Errno 1]", "not allowed to raise maximum limit")


def refusal_texts(attack: str) -> tuple[str, ...]:
    """What the verdict says when the sandbox refused ``attack``: the errno that the CPU suite
    (tests/test_attacks_os.py) expects of it (a hidden home or repository: no such file), else
    any refusal."""
    errnos = expected_refusal(by_name(attack), processes=False)
    if errnos is None:
        return REFUSALS
    return tuple(f"{type(OSError(e, '')).__name__}: [Errno {e}]" for e in errnos)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="module")
def sandbox_cache(gpu_cache_dir):
    """The session's build cache (conftest.py): add and matmul are built there, for the arch every
    job carries, with the torch header the other GPU tests share."""
    return gpu_cache_dir


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox-gpu-world")
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    (home / "secret.txt").write_text("api key\n")
    (repo / "task.py").write_text("class Model: pass\n")
    listener = _Listener()
    yield {"home": home, "repo": repo, "listener": listener,
           "targets": {"home_file": str(home / "secret.txt"), "home_dir": str(home), "repo_dir": str(repo),
                       "repo_file": str(repo / "task.py"), "port": listener.port, "victim_pid": os.getpid(),
                       "scratch": str(root)}}
    listener.close()


@pytest.fixture(scope="module")
def pools(sandbox_cache):
    """(plain, confined): the confined pool is a GPU lane's (``LocalLane``) minus the lease."""
    from kevin_agent.evaluate.isolation import WorkerPool
    from kevin_agent.evaluate.lanes import granted_devices_env, worker_confinement

    extra = {"CUDA_CACHE_PATH": str(sandbox_cache / "cuda-jit"), **granted_devices_env()}
    with WorkerPool(run_timeout_s=300.0) as plain, \
            WorkerPool(run_timeout_s=300.0, extra_env=extra, confine=worker_confinement("required", sandbox_cache)) \
            as boxed:
        yield plain, boxed


@pytest.mark.timeout(300)
def test_self_check_passes_on_the_gpu_host():
    proc = subprocess.run([sys.executable, "-m", "kevin_agent.evaluate.sandbox"], capture_output=True, text=True,
                          timeout=200, env=_env())
    log_record({"event": "sandbox-check", "stdout": proc.stdout[-4000:], "rc": proc.returncode})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ("add", "matmul"))
def test_correct_kernel_passes_confined_with_unchanged_timing(pools, sandbox_cache, name):
    plain, boxed = pools
    medians = {}
    for label, pool in (("plain", plain), ("confined", boxed), ("plain2", plain), ("confined2", boxed)):
        mode = "required" if label.startswith("confined") else "off"
        result = run_job(pool, sandbox_cache, task_source(name), correct_candidate(name), f"sandbox/{label}/{name}",
                         sandbox=mode, **TIMED)
        verdict = result.verdict
        assert (verdict.stage, verdict.ok) == (Stage.TIMING, True), (label, verdict.message, result.stderr_tail)
        kernel, sandbox = verdict.details.timing.kernel, verdict.details.environment.sandbox or ""
        assert kernel is not None, verdict.message
        medians[label] = kernel.median_ms
        if mode == "required":  # both layers: the candidate's, on top of the start-up one
            assert sandbox.startswith("landlock abi"), sandbox
            assert "(start-up: landlock abi" in sandbox, sandbox
        else:
            assert sandbox == "off", sandbox
    plain_ms = min(medians["plain"], medians["plain2"])
    boxed_ms = min(medians["confined"], medians["confined2"])
    log_record({"event": "sandbox-timing", "name": name, "medians_ms": medians, "ratio": boxed_ms / plain_ms})
    assert boxed_ms == pytest.approx(plain_ms, rel=0.05), medians


def _with_attack(source: str, code: str, where: str, targets: dict) -> str:
    head = PRELUDE + f"\nT = {targets!r}\n"
    if where == "import":
        return head + code + "\n" + source
    return (head + source + "\n_kevin_forward = ModelNew.forward\n"
            "def _attacking_forward(self, *args):\n    " + code + "\n    return _kevin_forward(self, *args)\n"
            "ModelNew.forward = _attacking_forward\n")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ("import", "forward"))
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_in_a_cuda_candidate_is_stopped(pools, sandbox_cache, world, attack, where):
    _, boxed = pools
    before = world["listener"].accepted
    source = _with_attack(correct_candidate("add"), by_name(attack).code, where, world["targets"])
    result = run_job(boxed, sandbox_cache, task_source("add"), source, f"sandbox/attack/{attack}/{where}",
                     sandbox="required", with_torch_compile=False, timing_trials=5, warmup_trials=1)
    verdict = result.verdict
    assert not verdict.ok and verdict.stage == Stage.LOAD, (verdict.stage, verdict.message, result.stderr_tail)
    assert any(r in verdict.message for r in refusal_texts(attack)), verdict.message
    assert world["listener"].accepted == before
    assert not list(world["repo"].glob("pwned-*"))


@pytest.mark.timeout(300)
def test_torch_compile_works_under_the_startup_layer_only(tmp_path, sandbox_cache):
    """torch.compile (Triton: ptxas, a C compiler) needs processes: it runs under the start-up
    layer; under the candidate layer it is refused, so the reference must be compiled first."""
    job = tmp_path / "job"
    (job / "work").mkdir(parents=True)
    caches = [sandbox_cache / "inductor", sandbox_cache / "triton"]
    code = f"""
import os, json, sys
os.environ["TORCHINDUCTOR_CACHE_DIR"] = {str(caches[0])!r}
os.environ["TRITON_CACHE_DIR"] = {str(caches[1])!r}
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
from kevin_agent.evaluate.sandbox import confine, startup_policy, worker_policy
for c in {[str(c) for c in caches]!r}:
    os.makedirs(c, exist_ok=True)
import dataclasses
policy = startup_policy({str(job)!r}, {str(sandbox_cache)!r}, extra_write={[str(c) for c in caches]!r})
files = [p for p in os.environ.get("KEVIN_SANDBOX_TEST_WRITE_FILES", "").split(":") if p]
families = [int(f) for f in os.environ.get("KEVIN_SANDBOX_TEST_FAMILIES", "").split(",") if f]
policy = dataclasses.replace(policy, write_files=tuple(files) or policy.write_files,
                             socket_families=tuple(families) or policy.socket_families)
first = confine(policy, "required")
import torch
x = torch.randn(1000, 1000, device="cuda")
f = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2 + 1)
ok1 = torch.allclose(f(x), torch.nn.functional.gelu(x) * 2 + 1, atol=1e-5)
second = confine(dataclasses.replace(worker_policy({str(job)!r}, []), write_files=policy.write_files), "required")
try:
    g = torch.compile(lambda t: torch.sigmoid(t) * 3 - 1)
    g(x); torch.cuda.synchronize(); compiled_after = "ok"
except Exception as exc:
    compiled_after = type(exc).__name__ + ": " + str(exc)[:200]
print("OUT:" + json.dumps({{"first": first.applied, "ok1": bool(ok1), "threads": second.threads,
                           "after": compiled_after}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=job / "work", capture_output=True, text=True,
                          timeout=280, env=_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("OUT:")]
    assert lines, proc.stderr[-4000:]
    out = json.loads(lines[0][4:])
    log_record({"event": "sandbox-torch-compile", **out})
    assert out["ok1"], out
    assert out["after"] != "ok", "torch.compile was expected to need processes once the candidate layer is on"


MQ_NAME = "/kevin-gpu-ipc-attack"


def ipc_state() -> dict[str, list[str]]:
    """Every System V object of this IPC namespace (``ipcs``), by key and id."""
    return {kind: sorted(" ".join(line.split()[:2]) for line in open(f"/proc/sysvipc/{kind}").read().splitlines()[1:])
            for kind in ("shm", "msg", "sem")}


def _clean_up(before: dict[str, list[str]]) -> None:
    """Remove what a control run left: objects not there before, and the POSIX queue."""
    import ctypes

    lib = ctypes.CDLL(None, use_errno=True)
    for kind, remove in (("shm", lib.shmctl), ("msg", lib.msgctl)):
        for entry in set(ipc_state()[kind]) - set(before[kind]):
            remove(int(entry.split()[1]), 0, None)
    lib.mq_unlink(MQ_NAME.encode())


def posix_queue_exists(name: str) -> bool:
    import ctypes

    fd = ctypes.CDLL(None, use_errno=True).mq_open(name.encode(), os.O_RDONLY)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


IPC_ATTACK = (
    "import ctypes as _c, os as _o\n_l = _c.CDLL(None, use_errno=True)\n"
    "_l.shmat.restype = _c.c_void_p\n_l.shmat.argtypes = [_c.c_int, _c.c_void_p, _c.c_int]\n"
    "_id = _l.shmget({key}, 0, 0)\n_e1 = _c.get_errno()\n"
    "_seen = _c.string_at(_l.shmat(_id, None, 0o10000), 40).split(b'\\0')[0].decode() if _id >= 0 else ''\n"
    "_q = _l.mq_open({mq!r}.encode(), _o.O_CREAT | _o.O_RDWR, 0o600, None)\n_e2 = _c.get_errno()\n"
    "_m = _l.msgget(0, 0o1600)\n"
    "raise RuntimeError('ipc shmget=%d errno=%d seen=%r mq=%d errno=%d msg=%d' % (_id, _e1, _seen, _q, _e2, _m))\n"
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ("import", "forward"))
@pytest.mark.parametrize("confined", (False, True), ids=("control", "confined"))
def test_ipc_in_a_cuda_candidate_is_refused(pools, sandbox_cache, where, confined):
    """Candidate code in the GPU worker attaches another program's shared memory (a secret in
    it) and makes a POSIX queue and a System V queue: the candidate layer's filter refuses all
    (EPERM), in the worker's own IPC namespace; the control (sandbox off) reads the secret."""
    import ctypes
    import secrets

    lib = ctypes.CDLL(None, use_errno=True)
    lib.shmat.restype = ctypes.c_void_p
    lib.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    key, secret = secrets.randbits(30) + 1, "GPU-IPC-SECRET-" + secrets.token_hex(6)
    shmid = lib.shmget(key, 4096, 0o1600)
    ctypes.memmove(lib.shmat(shmid, None, 0), secret.encode() + b"\0", len(secret) + 1)
    before = ipc_state()
    plain, boxed = pools
    code = IPC_ATTACK.format(key=key, mq=MQ_NAME)
    try:
        if where == "forward":
            code = code.replace("\n", "\n    ")
        source = _with_attack(correct_candidate("add"), code, where, {})
        result = run_job(boxed if confined else plain, sandbox_cache, task_source("add"), source,
                         f"sandbox/ipc/{where}/{confined}", sandbox="required" if confined else "off",
                         with_torch_compile=False, timing_trials=5, warmup_trials=1)
        message = result.verdict.message
        log_record({"event": "sandbox-ipc", "where": where, "confined": confined, "message": message[-600:]})
        assert "ipc shmget=" in message, (message, result.stderr_tail)
        if confined:
            assert secret not in message and "shmget=-1 errno=1" in message and "mq=-1 errno=1" in message
            assert ipc_state() == before and not posix_queue_exists(MQ_NAME)
        else:
            assert secret in message
    finally:
        _clean_up(before)
        lib.shmctl(shmid, 0, None)
