"""System V and POSIX IPC from candidate code: another program's shared memory, objects left behind.

The attacker's top level (run by the load_inline recorder, as ``kevin eval --compile-only`` runs
it) attaches a shared-memory segment another program of the same user made (a secret in it), by
its key, and leaves a segment, a message queue, a semaphore set and a POSIX message queue behind.
Confined, nothing of the secret comes back and the host's IPC state is unchanged; the control
(the sandbox off) shows the attack works here. A second layer, the IPC namespace alone, is shown
through the launcher with a policy whose filter allows the calls (the GPU worker's start-up layer).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.evaluate.build.specs import SourceExtractionError, record_in_child
from kevin_agent.evaluate.sandbox import launch_command, record_policy
from kevin_agent.evaluate.sandbox.policy import bounded

IPC_CREAT, IPC_RMID, SHM_RDONLY = 0o1000, 0, 0o10000
MQ_NAME = "/kevin-ipc-attack-" + secrets.token_hex(4)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux IPC")


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.shmat.restype = ctypes.c_void_p
    lib.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.shmdt.argtypes = [ctypes.c_void_p]
    return lib


def ipc_state() -> dict[str, list[str]]:
    """What ``ipcs`` shows: every System V object of this IPC namespace (the header dropped)."""
    state = {}
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        state[kind] = sorted(" ".join(line.split()[:2]) for line in lines)  # key and id
    if os.path.isdir("/dev/mqueue"):
        state["mqueue"] = sorted(os.listdir("/dev/mqueue"))
    return state


def posix_queue_exists(name: str) -> bool:
    """Whether a POSIX message queue ``name`` exists (the mqueue fs need not be mounted)."""
    lib = _libc()
    fd = lib.mq_open(name.encode(), os.O_RDONLY)
    if fd < 0:
        return False
    os.close(fd)
    return True


@pytest.fixture
def victim_segment():
    """A segment another program of this user made, holding a secret: (key, secret)."""
    lib = _libc()
    key, secret = secrets.randbits(30) + 1, "IPC-SECRET-" + secrets.token_hex(8)
    shmid = lib.shmget(key, 4096, IPC_CREAT | 0o600)
    if shmid < 0:
        pytest.skip(f"System V shared memory unavailable here (errno {ctypes.get_errno()})")
    addr = lib.shmat(shmid, None, 0)
    ctypes.memmove(addr, secret.encode() + b"\0", len(secret) + 1)
    lib.shmdt(addr)
    yield key, secret
    lib.shmctl(shmid, IPC_RMID, None)


ATTACK = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
seen = []
shmid = libc.shmget({key}, 0, 0)
if shmid >= 0:
    addr = libc.shmat(shmid, None, {rdonly})
    seen.append(ctypes.string_at(addr, 64).split(b"\\0")[0].decode() if addr not in (None, 2**64 - 1)
                else "shmat errno %d" % ctypes.get_errno())
else:
    seen.append("shmget errno %d" % ctypes.get_errno())
left = [libc.shmget(0, 1 << 20, 0o1600), libc.msgget(0, 0o1600), libc.semget(0, 4, 0o1600),
        libc.mq_open({mq!r}.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)]
raise RuntimeError("found %r, left %r, errno %d" % (seen, left, ctypes.get_errno()))
from torch.utils.cpp_extension import load_inline
load_inline(name="e", cpp_sources="int f();", functions=["f"])
"""


def _clean_up(before: dict[str, list[str]]) -> None:
    """Remove what a control run left (objects of this namespace not there before)."""
    lib = _libc()
    for kind, remove in (("shm", lib.shmctl), ("msg", lib.msgctl), ("sem", lib.semctl)):
        old = set(before[kind])
        for entry in ipc_state()[kind]:
            if entry not in old:
                remove(int(entry.split()[1]), IPC_RMID, *((0,) if kind == "sem" else ()), None)
    lib.mq_unlink(MQ_NAME.encode())


def _record(code: str, confined: bool) -> str:
    try:
        record_in_child(code, timeout_s=120, sandbox="required" if confined else "off")
    except SourceExtractionError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("confined", (False, True), ids=("control", "confined"))
def test_the_recorder_cannot_read_another_programs_segment_or_leave_ipc_behind(victim_segment, confined):
    key, secret = victim_segment
    before = ipc_state()
    message = _record(ATTACK.format(key=key, rdonly=SHM_RDONLY, mq=MQ_NAME), confined)
    after, queue = ipc_state(), posix_queue_exists(MQ_NAME)
    try:
        assert "found" in message, message  # the attack ran and reported
        if not confined:  # the control: without the sandbox the attack works on this host
            assert secret in message and (after != before or queue)
            return
        assert secret not in message and "shmget errno 1" in message  # seccomp: EPERM
        assert after == before and not queue
    finally:
        _clean_up(before)


NAMESPACE_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
made = libc.shmget(0, 4096, 0o1600)
print("victim", libc.shmget({key}, 0, 0), ctypes.get_errno(), "made", made, flush=True)
"""


@pytest.mark.parametrize("confined", (False, True), ids=("control", "confined"))
def test_a_confined_child_has_an_ipc_namespace_of_its_own(tmp_path, victim_segment, confined):
    """With the filter allowing the calls (``metadata=True``, as the GPU worker's start-up layer
    has it), the host's segment is not there, and what the child made ends with it."""
    key, _ = victim_segment
    script = tmp_path / "probe.py"
    script.write_text(NAMESPACE_PROBE.format(key=key))
    policy = bounded(record_policy(tmp_path), {"metadata": True})
    argv = launch_command(policy, ["kevin_agent.evaluate.sandbox.attack_run", str(script)],
                          "required" if confined else "off", module=True)
    before = ipc_state()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             stdin=subprocess.DEVNULL).stdout.split()
        assert out[0] == "victim" and int(out[4]) >= 0, out  # the child could make a segment
        if confined:
            assert int(out[1]) == -1 and out[2] == "2" and ipc_state() == before  # ENOENT; gone with it
        else:
            assert int(out[1]) >= 0 and ipc_state() != before
    finally:
        _clean_up(before)


IPC_CALLS = {"shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
             "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
             "mq_getsetattr"}


def test_ipc_calls_are_refused_in_every_candidate_layer_on_both_architectures():
    """Refused wherever metadata calls are (recorder, compile, listing, the worker's candidate
    layer), allowed only in the worker's start-up layer, on x86_64 and aarch64 alike."""
    from kevin_agent.evaluate.sandbox import seccomp

    for arch in ("x86_64", "aarch64"):
        for processes in (False, True):
            _, denied = seccomp.build_filter(network=False, processes=processes, arch=arch)
            assert IPC_CALLS <= set(denied), (arch, IPC_CALLS - set(denied))
        _, startup = seccomp.build_filter(network=False, processes=True, arch=arch, metadata=True)
        assert not IPC_CALLS & set(startup)


@pytest.mark.parametrize("confined", (False, True), ids=("control", "confined"))
def test_the_gpu_workers_candidate_layer_refuses_ipc_too(tmp_path, victim_segment, confined):
    """The CPU stand-in of tests/gpu/test_sandbox_gpu.py::test_ipc_in_a_cuda_candidate_is_refused:
    the worker's candidate layer (``worker_policy``) through the launcher, as a GPU lane starts it."""
    from kevin_agent.evaluate.sandbox import worker_policy

    key, secret = victim_segment
    script = tmp_path / "attack.py"
    script.write_text(ATTACK.format(key=key, rdonly=SHM_RDONLY, mq=MQ_NAME).split("from torch")[0])
    argv = launch_command(worker_policy(tmp_path, gpu=False), ["kevin_agent.evaluate.sandbox.attack_run", str(script)],
                          "required" if confined else "off", module=True)
    before = ipc_state()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
        assert "found" in proc.stderr, proc.stderr[-2000:]
        if confined:
            assert secret not in proc.stderr and "shmget errno 1" in proc.stderr
            assert ipc_state() == before and not posix_queue_exists(MQ_NAME)
        else:
            assert secret in proc.stderr
    finally:
        _clean_up(before)
