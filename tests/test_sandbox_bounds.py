"""The launcher's bounds (issue 18): a PID namespace that ends with the child, the scratch
budget, the exit status passed on, and the seccomp filter's metadata decisions. Real children,
fixed numbers (not the module's constants)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevin_agent.evaluate.sandbox import compile_policy, launch_command, seccomp
from kevin_agent.evaluate.sandbox.attacks import lingering
from kevin_agent.evaluate.sandbox.limits import limit_message
from kevin_agent.evaluate.sandbox.policy import bounded
from kevin_agent.evaluate.sandbox.relay import disk_usage

MIB = 1 << 20


def launch(policy, argv, mode="required", **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "KEVIN_SANDBOX_VERBOSE": "1"}
    return subprocess.run(launch_command(policy, argv, mode), capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL, **kw)


@pytest.mark.timeout(300)
def test_a_scratch_flood_is_stopped_with_a_verdict(tmp_path):
    """20 MB files, one every 50 ms, against a 64 MB budget (files up to 32 MB each): stopped
    long before the 60th, and the line says why; unconfined, six are written."""
    policy = bounded(compile_policy(tmp_path), {"max_scratch_bytes": 64 * MIB, "max_file_bytes": 32 * MIB})
    write = "i=0; while [ $i -lt {n} ]; do head -c 20000000 /dev/zero > f$i; i=$((i+1)); sleep 0.05; done"
    control = launch(policy, ["/bin/sh", "-c", write.format(n=6)], mode="off", cwd=tmp_path)
    assert control.returncode == 0 and disk_usage([str(tmp_path)])[0] >= 110 * MIB
    for path in tmp_path.glob("f*"):
        path.unlink()
    boxed = launch(policy, ["/bin/sh", "-c", write.format(n=60)], cwd=tmp_path)
    assert boxed.returncode == 71, boxed.stderr
    assert limit_message(boxed.stderr) == "your compile wrote more than 64 MB into its folder and was stopped"
    assert len(list(tmp_path.glob("f*"))) < 60


@pytest.mark.timeout(120)
def test_a_file_past_the_size_limit_fails_with_efbig(tmp_path):
    policy = bounded(compile_policy(tmp_path), {"max_file_bytes": 8 * MIB})
    boxed = launch(policy, ["/bin/sh", "-c", "head -c 9000000 /dev/zero > big; echo rc=$?"], cwd=tmp_path)
    assert "File too large" in boxed.stderr and "rc=1" in boxed.stdout
    assert (tmp_path / "big").stat().st_size == 8 * MIB


@pytest.mark.timeout(120)
def test_the_child_is_the_first_process_of_its_own_pid_namespace(tmp_path):
    boxed = launch(compile_policy(tmp_path), ["/bin/sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"], cwd=tmp_path)
    pid, processes = boxed.stdout.split()
    assert pid == "1" and int(processes) <= 3, boxed.stdout  # sh, ls, grep: nothing of the host
    assert "pid namespace, at most 1024 processes" in boxed.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("code, expect", [("raise SystemExit(3)", 3), ("import ctypes; ctypes.string_at(0)",
                                                                      -signal.SIGSEGV)])
def test_the_launcher_exits_as_the_child_did(tmp_path, code, expect):
    boxed = launch(compile_policy(tmp_path), [sys.executable, "-c", code], cwd=tmp_path)
    assert boxed.returncode == expect, boxed.stderr[-1000:]


@pytest.mark.timeout(120)
def test_killing_the_launcher_ends_everything_the_child_started(tmp_path):
    """SIGKILL to the launcher's process group (what ``kill_group`` does) ends the namespace,
    daemons in their own session included."""
    marker = f"{7000 + os.getpid() % 997}.25"
    script = f"(setsid sleep {marker} &); (setsid sleep {marker} &); echo started; sleep 60"
    proc = subprocess.Popen(launch_command(compile_policy(tmp_path), ["/bin/sh", "-c", script], "required"),
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
    assert wait_for(lambda: len(lingering(marker)) == 2), "the daemons did not start"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert wait_for(lambda: not lingering(marker)), f"{len(lingering(marker))} daemons outlived the launcher"


def wait_for(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


X86 = {"chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "fchownat": 260, "utimensat": 280,
       "fsetxattr": 190, "removexattrat": 466}
AARCH64 = {"fchmod": 52, "fchmodat": 53, "fchownat": 54, "utimensat": 88, "setxattr": 5, "fremovexattr": 16}


@pytest.mark.parametrize("arch, table", [("x86_64", X86), ("aarch64", AARCH64)])
def test_seccomp_refuses_metadata_calls_unless_allowed(arch, table):
    from test_sandbox import _run_bpf

    audit = seccomp.AUDIT_ARCH[arch]
    refused, _ = seccomp.build_filter(network=False, processes=True, arch=arch)
    allowed, _ = seccomp.build_filter(network=False, processes=True, arch=arch, metadata=True)
    for name, nr in table.items():
        assert _run_bpf(refused, nr, audit) == seccomp.RET_ERRNO | 1, name
        assert _run_bpf(allowed, nr, audit) == seccomp.RET_ALLOW, name


def test_the_limit_line_is_found_in_a_childs_output():
    text = "ninja: building\nxxxx\nkevin-sandbox: limit: your compile printed more than 16 MB and was stopped\n"
    assert limit_message(text) == "your compile printed more than 16 MB and was stopped"
    assert limit_message("error: ld: final link failed: File too large") is not None
    assert limit_message("an ordinary error") is None


def test_disk_usage_counts_blocks_not_apparent_size(tmp_path):
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(1 << 30)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "real").write_bytes(b"x" * MIB)
    used, entries = disk_usage([str(tmp_path)])
    assert MIB <= used < 2 * MIB and entries == 3
    assert Path(tmp_path / "sparse").stat().st_size == 1 << 30
