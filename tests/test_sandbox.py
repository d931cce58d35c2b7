"""The OS-level sandbox (issue 14), for real: confined child processes, no mocks.

Every attack runs twice, in a confined child and in an unconfined one, at a candidate's import
and inside ModelNew.forward: it must fail with the expected error under the sandbox and succeed
without it, so the sandbox is what stops it (no static checks are involved).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from kevin_agent.evaluate.sandbox import (
    SandboxPolicy,
    SandboxSupport,
    SandboxUnavailable,
    compile_policy,
    confine,
    explain_denial,
    launch_command,
    probe,
    seccomp,
    startup_policy,
    unavailable,
    worker_policy,
)
from kevin_agent.evaluate.sandbox.attacks import ATTACKS, by_name, candidate_source
from kevin_agent.evaluate.sandbox.check import _Listener, compare, run_check_child

ROOT = Path(__file__).resolve().parents[1]
HARNESS = Path(__file__).parent / "fixtures" / "sandbox" / "harness.py"
MARKER = "HARNESS:"

# what the sandbox answers to each attack: errno, or the exception Python raises for it
EXPECTED = {
    "read_home": errno.EACCES, "list_home": errno.EACCES, "read_repo": errno.EACCES, "write_repo": errno.EACCES,
    "list_repo": errno.EACCES, "tcp_connect": errno.EPERM, "unix_socket": errno.EPERM, "spawn_shell": errno.EPERM,
    "raise_nofile": "ValueError", "raise_cpu": "ValueError", "ptrace": errno.EPERM, "read_environ": errno.EACCES,
    "signal": errno.EPERM, "io_uring": errno.EPERM, "mknod": errno.EPERM, "undo_landlock": errno.EACCES,
}
TESTED = [a for a in ATTACKS if a.name in EXPECTED]
PLACES = ("import", "forward")


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["HOME"] = str(home)
    env["KEVIN_SANDBOX_TEST_SECRET"] = "only-the-victim-has-this"
    return env


def run_harness(workdir: Path, spec: dict, home: Path, timeout: float = 240) -> dict:
    spec_path = workdir / f"spec-{len(list(workdir.glob('spec-*')))}.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(HARNESS), str(spec_path)], cwd=workdir, env=child_env(home),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise AssertionError(f"harness failed ({proc.returncode}): {proc.stderr[-3000:]}")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A fake home with a secret, a repository with the task file, a scratch directory, a TCP
    listener on 127.0.0.1 and a victim process, all outside the sandbox but the scratch."""
    root = tmp_path_factory.mktemp("sandbox-world")
    home, repo, scratch = root / "home", root / "repo", root / "scratch"
    for d in (home, repo, scratch):
        d.mkdir()
    (home / "secret.txt").write_text("api key\n")
    (repo / "task.py").write_text("class Model: pass\n")
    listener = _Listener()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"], env=child_env(home),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    targets = {"home_file": str(home / "secret.txt"), "home_dir": str(home), "repo_dir": str(repo),
               "repo_file": str(repo / "task.py"), "port": listener.port, "victim_pid": victim.pid,
               "scratch": str(scratch)}
    yield {"root": root, "home": home, "repo": repo, "scratch": scratch, "targets": targets, "listener": listener}
    victim.kill()
    victim.wait()
    listener.close()


# -- probe -----------------------------------------------------------------------------------

def test_probe_reports_landlock_and_seccomp():
    support = probe()
    assert support.landlock_abi >= 1, f"Landlock is expected on this host: {support.landlock_reason}"
    assert support.seccomp, f"seccomp filters are expected on this host: {support.seccomp_reason}"
    assert support.available and support.reason == ""
    assert support.summary() == f"landlock abi {support.landlock_abi} + seccomp"


# -- attacks, at import and in forward -------------------------------------------------------

@pytest.fixture(scope="module")
def attack_runs(world):
    scratch, targets = world["scratch"], world["targets"]
    candidates: list[dict[str, Any]] = []
    ordered = [a for a in TESTED if not a.last] + [a for a in TESTED if a.last]
    for where in PLACES:
        for attack in ordered:
            key = f"{attack.name}-{where}"
            path = scratch / f"candidate_{key.replace('-', '_')}.py"
            path.write_text(candidate_source(attack, targets, where, torch=True))
            candidates.append({"key": key, "path": str(path), "where": where, "last": attack.last})
    candidates.sort(key=lambda c: c["last"])  # the process-changing attacks after the others
    policy = worker_policy(scratch, gpu=False, protect=[world["repo"]])
    assert not policy.exposed, policy.exposed
    before = world["listener"].accepted
    confined = run_harness(world["root"], {"mode": "required", "policy": policy.to_dict(), "import_torch": True,
                                           "candidates": candidates}, world["home"])
    accepted_confined = world["listener"].accepted - before
    control = run_harness(world["root"], {"mode": "off", "policy": None, "import_torch": True,
                                          "candidates": candidates}, world["home"])
    return {"confined": confined, "control": control, "accepted_confined": accepted_confined}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("name", [a.name for a in TESTED])
def test_attack_is_stopped_by_the_sandbox(attack_runs, name, where):
    key = f"{name}-{where}"
    blocked = attack_runs["confined"]["results"][key]
    unconfined = attack_runs["control"]["results"][key]
    assert unconfined["ok"], f"{by_name(name).what} must work without the sandbox: {unconfined}"
    assert not blocked["ok"], f"{by_name(name).what} was NOT blocked at {where}"
    expected = EXPECTED[name]
    if isinstance(expected, str):  # resource.setrlimit turns EPERM into this ValueError
        assert blocked["type"] == expected and "not allowed" in blocked["message"], blocked
    else:
        assert blocked["errno"] == expected, blocked
        assert blocked["type"] == "PermissionError", blocked
    # the evaluator can name the sandbox in the verdict from the error alone
    text = f"{blocked['type']}: [Errno {blocked['errno']}] {blocked['message']}"
    assert isinstance(expected, str) or "Blocked by the sandbox" in (explain_denial(text, _active_report()) or "")


def test_the_confined_child_never_reached_the_listener(attack_runs):
    assert attack_runs["accepted_confined"] == 0
    report = attack_runs["confined"]["reports"][0]
    assert report["applied"].startswith("landlock abi ") and report["applied"].endswith(" + seccomp")
    assert report["all_threads"] and report["threads"] == 1 and report["no_new_privs"]


def _active_report():
    from kevin_agent.evaluate.sandbox.enforce import SandboxReport

    return SandboxReport("auto", "landlock abi 7 + seccomp", landlock_abi=7, seccomp=True)


# -- what candidates legitimately do still works ----------------------------------------------

EXT_SOURCE = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""


@pytest.fixture(scope="module")
def prebuilt_extension(tmp_path_factory, world):
    """A tiny CPU extension built by g++ under the compile policy (so the compile child's
    confinement is exercised too), in a directory outside any writable area of the worker."""
    torch_utils = pytest.importorskip("torch.utils.cpp_extension")
    build = tmp_path_factory.mktemp("ext-build")
    (build / "ext.cpp").write_text(EXT_SOURCE)
    includes = torch_utils.include_paths() + [sysconfig.get_paths()["include"]]
    command = ["g++", "-O0", "-shared", "-fPIC", "-std=c++20", "-DTORCH_EXTENSION_NAME=kevin_sbx_ext",
               "-DTORCH_API_INCLUDE_EXTENSION_H", *[f"-I{p}" for p in includes], "ext.cpp",
               *[f"-L{p}" for p in torch_utils.library_paths()], "-lc10", "-ltorch", "-ltorch_cpu",
               "-ltorch_python", "-o", "kevin_sbx_ext.so"]
    policy = compile_policy(build, protect=[world["repo"]])
    proc = subprocess.run(launch_command(policy, command, "required"), cwd=build, env=child_env(world["home"]),
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return build / "kevin_sbx_ext.so"


LEGIT_CODE = """
import os, tempfile, threading, importlib.util
import torch
def legit(T):
    x = torch.randn(300, 300)
    assert torch.allclose((x @ x.T).diagonal(), (x * x).sum(1), rtol=1e-3, atol=1e-3)  # torch's CPU threads
    spec = importlib.util.spec_from_file_location("kevin_sbx_ext", T["ext"])
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)                   # a prebuilt extension from a read-only directory
    assert torch.equal(ext.twice(torch.ones(3)), torch.full((3,), 2.0))
    with open(os.path.join(T["scratch"], "out.txt"), "w") as f:
        f.write("ok")                              # scratch is writable
    assert "Name:" in open("/proc/self/status").read()
    fd, name = tempfile.mkstemp()                  # TMPDIR is the scratch directory
    os.close(fd)
    assert name.startswith(T["scratch"]), name
    try:
        open(os.path.join(os.path.dirname(T["ext"]), "tampered.so"), "w")
    except PermissionError:
        pass                                       # the build entry is read-only
    else:
        raise AssertionError("the build cache entry is writable")
    t = threading.Thread(target=lambda: None); t.start(); t.join()
"""


@pytest.mark.timeout(600)
def test_legit_workload_still_works_confined(world, prebuilt_extension, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    targets = {"ext": str(prebuilt_extension), "scratch": str(scratch)}
    candidates = []
    for where in PLACES:
        path = scratch / f"legit_{where}.py"
        call = "legit(T)\n" if where == "import" else ""
        forward = "        legit(T)\n" if where == "forward" else ""
        path.write_text(f"T = {targets!r}\n" + LEGIT_CODE + call
                        + "class ModelNew(torch.nn.Module):\n    def forward(self, "
                          "x):\n" + forward + "        return x\n")
        candidates.append({"key": where, "path": str(path), "where": where})
    policy = worker_policy(scratch, [prebuilt_extension.parent], gpu=False, protect=[world["repo"]])
    out = run_harness(tmp_path, {"mode": "required", "policy": policy.to_dict(), "import_torch": False,
                                 "candidates": candidates}, world["home"])
    assert out["results"]["import"]["ok"], out["results"]["import"]
    assert out["results"]["forward"]["ok"], out["results"]["forward"]
    assert (scratch / "out.txt").read_text() == "ok"


@pytest.mark.timeout(120)
def test_compile_child_cannot_include_a_home_file(world, tmp_path):
    """Model-written C++ is compiled confined: ``#include`` of a secret fails (it would otherwise
    land in the compiler's error message, which goes back to the model)."""
    (tmp_path / "leak.cpp").write_text(f'#include "{world["home"] / "secret.txt"}"\n')
    command = ["g++", "-E", "leak.cpp", "-o", "leak.i"]
    free = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert free.returncode == 0 and "api key" in (tmp_path / "leak.i").read_text()
    (tmp_path / "leak.i").unlink()
    policy = compile_policy(tmp_path, protect=[world["repo"]])
    boxed = subprocess.run(launch_command(policy, command, "required"), cwd=tmp_path, env=child_env(world["home"]),
                           capture_output=True, text=True, timeout=60)
    assert boxed.returncode != 0
    # the home is hidden: the file is not there (Landlock alone would say "Permission denied")
    assert "No such file or directory" in boxed.stderr and "api key" not in boxed.stderr + boxed.stdout


# -- threads: the worker's two layers ---------------------------------------------------------

TWO_LAYERS = r"""
import json, os, queue, socket, subprocess, sys, threading
from kevin_agent.evaluate.sandbox import SandboxPolicy, confine
spec = json.loads(sys.argv[1])
first = confine(SandboxPolicy.from_dict(spec["startup"]), "required")
subprocess.run(["/bin/true"], check=True)        # start-up may run programs (torch.compile's compilers)
import torch
(torch.randn(200, 200) @ torch.randn(200, 200)).sum()
jobs, answers = queue.Queue(), queue.Queue()
def old_thread():
    while True:
        fn = jobs.get()
        try:
            fn(); answers.put("ok")
        except Exception as exc:
            answers.put(f"{type(exc).__name__} {getattr(exc, 'errno', None)}")
threading.Thread(target=old_thread, daemon=True).start()
second = confine(SandboxPolicy.from_dict(spec["candidate"]), "required")
def on_old(fn):
    jobs.put(fn); return answers.get(timeout=30)
def on_main(fn):
    try:
        fn(); return "ok"
    except Exception as exc:
        return f"{type(exc).__name__} {getattr(exc, 'errno', None)}"
cache_file = os.path.join(spec["cache_write"], "x")
out = {
    "threads": second.threads, "all_threads": second.all_threads, "first": first.applied, "second": second.applied,
    "old_read_home": on_old(lambda: open(spec["home_file"]).read()),
    "old_spawn": on_old(lambda: subprocess.run(["/bin/true"])),
    "old_socket": on_old(lambda: socket.socket()),
    "old_write_cache": on_old(lambda: open(cache_file, "w").write("x")),
    "main_write_cache": on_main(lambda: open(cache_file + "2", "w").write("x")),
    "main_write_scratch": on_main(lambda: open(os.path.join(spec["scratch"], "y"), "w").write("y")),
}
print("TWO:" + json.dumps(out), flush=True)
"""


@pytest.mark.timeout(300)
def test_worker_layers_bind_threads_started_between_them(world, tmp_path):
    job, cache = tmp_path / "job", tmp_path / "cache"
    (job / "work").mkdir(parents=True)
    (cache / "inductor").mkdir(parents=True)
    startup = startup_policy(job, cache, extra_write=[cache / "inductor"], gpu=False, protect=[world["repo"]])
    candidate = worker_policy(job / "work", gpu=False, protect=[world["repo"]])
    spec = {"startup": startup.to_dict(), "candidate": candidate.to_dict(),
            "home_file": str(world["home"] / "secret.txt"), "cache_write": str(cache / "inductor"),
            "scratch": str(job / "work")}
    proc = subprocess.run([sys.executable, "-c", TWO_LAYERS, json.dumps(spec)], cwd=job / "work",
                          env=child_env(world["home"]), capture_output=True, text=True, timeout=240)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("TWO:")]
    assert line, proc.stderr[-3000:]
    out = json.loads(line[0][4:])
    assert out["threads"] > 1 and out["all_threads"], out
    assert out["old_read_home"] == f"PermissionError {errno.EACCES}"  # layer 1 binds every thread
    assert out["old_spawn"] == f"PermissionError {errno.EPERM}"  # seccomp reached the old thread (TSYNC)
    assert out["old_socket"] == f"PermissionError {errno.EPERM}"
    assert out["main_write_cache"] == f"PermissionError {errno.EACCES}"  # layer 2 on the main thread
    assert out["main_write_scratch"] == "ok"
    # documented limit (ABI < 8): a thread that existed before layer 2 keeps layer 1's writes
    assert out["old_write_cache"] in ("ok", f"PermissionError {errno.EACCES}")


# -- modes and support -------------------------------------------------------------------------

def test_required_mode_refuses_to_run_without_landlock(tmp_path):
    policy = worker_policy(tmp_path, gpu=False)
    missing = unavailable("simulated: this kernel has no Landlock")
    with pytest.raises(SandboxUnavailable, match="sandbox required but landlock unavailable: simulated"):
        confine(policy, "required", support=missing)
    partial = SandboxSupport(7, "", False, "simulated: no seccomp", False, "x86_64", "test")
    with pytest.raises(SandboxUnavailable, match="seccomp unavailable: simulated"):
        confine(policy, "required", support=partial)
    report = confine(policy, "auto", support=missing)
    assert not report.active
    assert report.details_line() == ("sandbox: none (landlock unavailable: simulated: this kernel has no Landlock; "
                                     "seccomp unavailable: simulated: this kernel has no Landlock)")
    assert confine(policy, "off").details_line() == "sandbox: off"
    with pytest.raises(ValueError):
        confine(policy, "sometimes")  # type: ignore[arg-type]  # a bad mode on purpose
    status = Path("/proc/self/status").read_text()  # nothing was applied to this (pytest) process
    assert "NoNewPrivs:\t0" in status and "Seccomp:\t0" in status


@pytest.mark.timeout(60)
def test_launch_required_refuses_and_explains(tmp_path):
    """A launched child that cannot be confined never runs its target (exit 70, one line)."""
    code = ("import sys, importlib; m = importlib.import_module;"
            "launch, p = m('kevin_agent.evaluate.sandbox.launch'), m('kevin_agent.evaluate.sandbox.support');"
            "m('kevin_agent.evaluate.sandbox.enforce').probe = lambda: p.unavailable('simulated');"
            "sys.exit(launch.main(sys.argv[1:]))")
    policy = worker_policy(tmp_path, gpu=False)
    proc = subprocess.run([sys.executable, "-c", code, "--mode", "required", "--policy", policy.to_json(), "--",
                           "/bin/echo", "target ran"], capture_output=True, text=True, timeout=60,
                          env=child_env(tmp_path))
    assert proc.returncode == 70 and "target ran" not in proc.stdout
    assert "sandbox required but landlock unavailable: simulated" in proc.stderr


@pytest.mark.timeout(60)
def test_x32_system_calls_kill_the_process(tmp_path):
    code = ("import ctypes; from kevin_agent.evaluate.sandbox import confine, worker_policy;"
            f"confine(worker_policy({str(tmp_path)!r}, gpu=False), 'required');"
            "ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=child_env(tmp_path))
    assert proc.returncode == -signal.SIGSYS and "survived" not in proc.stdout


# -- policies --------------------------------------------------------------------------------

def test_worker_policy_hides_home_checkout_and_cwd(tmp_path, monkeypatch):
    checkout = ROOT  # on sys.path (PYTHONPATH or an editable install): only kevin_agent/ is granted
    monkeypatch.chdir(tmp_path)
    policy = worker_policy(tmp_path / "scratch", ["/nonexistent/entry"], protect=[checkout])
    granted = policy.read_only + policy.read_write + policy.devices
    home = os.path.realpath(Path.home())
    assert not any(home == p or home.startswith(p.rstrip("/") + "/") for p in granted)
    assert str(checkout) not in granted and str(checkout / "kevin_agent") in granted
    assert "/tmp" not in granted and os.path.realpath(tmp_path) not in granted
    assert policy.tmpdir is None or policy.tmpdir.endswith("scratch")
    assert not policy.network and not policy.processes and not policy.exposed
    exposed = worker_policy(tmp_path / "scratch", extra_read=[Path.home()])
    assert exposed.exposed and home in exposed.exposed[0]
    assert SandboxPolicy.from_json(policy.to_json()) == policy


def test_explain_denial_names_the_sandbox():
    report = _active_report()
    assert "Blocked by the sandbox (landlock abi 7 + seccomp)" in (explain_denial(
        PermissionError(errno.EACCES, "Permission denied", "/home/u/.ssh/id_rsa"), report) or "")
    assert "not permitted" in (explain_denial("PermissionError: [Errno 1] Operation not permitted", report) or "")
    assert explain_denial(ValueError("bad shape"), report) is None


def test_explain_denial_stays_silent_without_an_active_sandbox(monkeypatch):
    """Only a refusal a sandbox produced is blamed on it: with no layer applied in this process, or
    a report whose layers are all off, the error is left as it is. With no report passed, the
    process's own current layer decides."""
    from kevin_agent.evaluate.sandbox import enforce
    from kevin_agent.evaluate.sandbox.enforce import SandboxReport

    denied = PermissionError(errno.EACCES, "Permission denied", "/home/u/.ssh/id_rsa")
    monkeypatch.setattr(enforce, "_LAYERS", [])
    assert explain_denial(denied) is None and explain_denial(denied, None) is None
    assert explain_denial("PermissionError: [Errno 1] Operation not permitted") is None
    off = SandboxReport("off", "off")
    assert not off.active and explain_denial(denied, off) is None
    monkeypatch.setattr(enforce, "_LAYERS", [off])
    assert explain_denial(denied) is None
    monkeypatch.setattr(enforce, "_LAYERS", [_active_report()])
    assert "Blocked by the sandbox (landlock abi 7 + seccomp)" in (explain_denial(denied) or "")


# -- the seccomp program, interpreted (x86_64 and aarch64) -------------------------------------

def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    ins = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_seccomp_program_decisions(arch):
    table, audit = seccomp.SYSCALLS[arch], seccomp.AUDIT_ARCH[arch]
    program, _ = seccomp.build_filter(network=False, processes=False, arch=arch)
    eperm, allow = seccomp.RET_ERRNO | errno.EPERM, seccomp.RET_ALLOW
    read_nr = 0 if arch == "x86_64" else 63
    assert _run_bpf(program, read_nr, audit) == allow
    assert _run_bpf(program, table["socket"], audit) == eperm
    assert _run_bpf(program, table["execve"], audit) == eperm
    assert _run_bpf(program, table["ptrace"], audit) == eperm
    assert _run_bpf(program, table["clone3"], audit) == seccomp.RET_ERRNO | errno.ENOSYS
    assert _run_bpf(program, table["clone"], audit, (0x3D0F00, 0, 0, 0, 0, 0)) == allow  # pthread_create
    assert _run_bpf(program, table["clone"], audit, (0x01200011, 0, 0, 0, 0, 0)) == eperm  # fork
    assert _run_bpf(program, table["clone"], audit, (0x3D0F00 | 0x10000000, 0, 0, 0, 0, 0)) == eperm  # userns
    assert _run_bpf(program, table["prlimit64"], audit, (0, 7, 0, 1234, 0, 0)) == allow  # getrlimit
    assert _run_bpf(program, table["prlimit64"], audit, (0, 7, 5678, 0, 0, 0)) == eperm
    assert _run_bpf(program, table["prlimit64"], audit, (0, 7, 1 << 40, 0, 0, 0)) == eperm
    assert _run_bpf(program, read_nr, 0x40000003) == seccomp.RET_KILL_PROCESS  # i386
    if arch == "x86_64":
        assert _run_bpf(program, 0x40000000 | 39, audit) == seccomp.RET_KILL_PROCESS  # x32
    unix_only, _ = seccomp.build_filter(network=False, processes=True, arch=arch, socket_families=(1,))
    assert _run_bpf(unix_only, table["socket"], audit, (1, 1, 0, 0, 0, 0)) == allow  # AF_UNIX
    assert _run_bpf(unix_only, table["socket"], audit, (2, 1, 0, 0, 0, 0)) == eperm  # AF_INET
    assert _run_bpf(unix_only, table["socket"], audit, (16, 3, 0, 0, 0, 0)) == eperm  # AF_NETLINK
    assert _run_bpf(unix_only, table["socketpair"], audit, (1, 1, 0, 0, 0, 0)) == eperm
    two, _ = seccomp.build_filter(network=False, processes=True, arch=arch, socket_families=(1, 16))
    assert _run_bpf(two, table["socket"], audit, (16, 3, 0, 0, 0, 0)) == allow
    assert _run_bpf(two, table["socket"], audit, (10, 1, 0, 0, 0, 0)) == eperm
    with_processes, _ = seccomp.build_filter(network=True, processes=True, arch=arch)
    assert _run_bpf(with_processes, table["execve"], audit) == allow
    assert _run_bpf(with_processes, table["socket"], audit) == allow
    assert _run_bpf(with_processes, table["clone"], audit, (0x01200011, 0, 0, 0, 0, 0)) == allow
    assert _run_bpf(with_processes, table["clone"], audit, (0x20000000, 0, 0, 0, 0, 0)) == eperm


# -- the self-check (python -m kevin_agent.evaluate.sandbox) ---------------------------------

@pytest.mark.timeout(120)
def test_self_check_blocks_everything(world, tmp_path):
    policy = worker_policy(world["scratch"], gpu=False, protect=[world["repo"]])
    targets = dict(world["targets"])
    confined = run_check_child(policy, targets, "required", world["scratch"])
    control = run_check_child(policy, targets, "off", world["scratch"])
    results = compare(confined["results"], control["results"])
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    blocked = {r.name for r in results if r.outcome == "blocked"}
    assert set(EXPECTED) <= blocked


@pytest.mark.timeout(120)
def test_self_check_command_exits_zero_here():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "kevin_agent.evaluate.sandbox"], capture_output=True, text=True,
                          timeout=100, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sandbox: landlock abi" in proc.stdout and "NOT BLOCKED" not in proc.stdout


@pytest.mark.timeout(120)
def test_launch_runs_a_module_already_confined(world):
    """``launch -m MODULE``: the module (here the self-check's child, told not to confine itself)
    runs under the launcher's layer, applied before the module's first line."""
    policy = worker_policy(world["scratch"], gpu=False, protect=[world["repo"]])
    argv = ["kevin_agent.evaluate.sandbox.check_child", "--mode", "off", "--policy", policy.to_json(),
            "--targets", json.dumps(world["targets"])]
    proc = subprocess.run(launch_command(policy, argv, "required", module=True), cwd=world["scratch"],
                          env=child_env(world["home"]), capture_output=True, text=True, timeout=100)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("KEVIN_SANDBOX_CHECK:")]
    assert line, proc.stderr[-2000:]
    results = json.loads(line[0][len("KEVIN_SANDBOX_CHECK:"):])["results"]
    assert not results["read_home"]["ok"] and not results["tcp_connect"]["ok"] and not results["spawn_shell"]["ok"]
    assert results["write_scratch"]["ok"] and results["thread"]["ok"]
