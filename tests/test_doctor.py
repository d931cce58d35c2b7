"""``kevin doctor`` on this machine: environment lines, then the sandbox self-check, all blocked."""

from __future__ import annotations

import subprocess
import sys


def test_doctor_reports_the_host_and_every_attack_is_blocked():
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "doctor"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.startswith("torch: ") and "\nnvcc: " in out and "\nGPUs: " in out
    assert "sandbox: landlock abi" in out  # this machine and the GPU machine have Landlock
    for attack in ("read a file in the user's home", "open a TCP connection", "spawn a shell",
                   "raise its RLIMIT_NOFILE", "write next to the task file", "list the repository"):
        line = next(ln for ln in out.splitlines() if attack in ln)
        assert " blocked " in line, line
    assert out.rstrip().endswith("all checks passed")
