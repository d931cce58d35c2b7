"""The worker's candidate layer (``stages.confine_candidate``) in a real child process: after it,
the candidate reads its job folder and build entries only; the home, the repository and the
network are refused, and the verdict's error names the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, socket, sys
from pathlib import Path
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.worker.stages import _with_denial, confine_candidate
job_dir, entry, repo, home_file = map(Path, sys.argv[1:5])
job = WorkerJob("task", "code", job_dir / "result.json", EvalSettings(sandbox="required"),
                build_entries=(str(entry),), protect=(str(repo),))
applied = confine_candidate(job, job_dir / "cache")
out = {"applied": applied}
def attempt(name, fn):
    try:
        fn(); out[name] = "allowed"
    except Exception as exc:
        out[name] = _with_denial(f"{type(exc).__name__}: {exc}", exc)
attempt("home", lambda: home_file.read_text())
attempt("repo", lambda: (repo / "model.py").read_text())
attempt("entry", lambda: (entry / "kernel.so").read_bytes())
attempt("write_job", lambda: (job_dir / "result.json").write_text("{}"))
attempt("socket", lambda: socket.create_connection(("127.0.0.1", 9)))
print(json.dumps(out))
"""


@pytest.mark.timeout(120)
def test_the_candidate_layer_confines_to_the_job_and_its_entries(tmp_path):
    job_dir, entry, repo, home = (tmp_path / n for n in ("job", "entry", "repo", "home"))
    for folder in (job_dir, entry, repo, home):
        folder.mkdir()
    (entry / "kernel.so").write_bytes(b"\x7fELF")
    (repo / "model.py").write_text("class Model: ...\n")
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(job_dir), str(entry), str(repo), str(home / ".netrc")],
                          capture_output=True, text=True, env=env, timeout=100)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["applied"].startswith("landlock abi") and "seccomp" in out["applied"]
    assert out["entry"] == "allowed" and out["write_job"] == "allowed"
    for refused in ("home", "repo", "socket"):
        assert "Blocked by the sandbox" in out[refused], out[refused]


def test_the_candidate_layer_grants_the_devices_its_parent_listed(tmp_path, monkeypatch):
    """Under the start-up layer /dev cannot be listed (``/dev/nvidia*`` finds nothing), so the
    candidate layer grants the device nodes the parent listed (``DEVICES_ENV``), not a glob's."""
    from kevin_agent.evaluate import sandbox
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.protocol import WorkerJob
    from kevin_agent.evaluate.sandbox import policy as policy_module
    from kevin_agent.evaluate.sandbox.enforce import SandboxReport
    from kevin_agent.evaluate.worker.stages import confine_candidate

    gpu_node = next((p for p in ("/dev/tty", "/dev/ptmx", "/dev/shm") if os.path.exists(p)), None)
    if gpu_node is None:
        pytest.skip("no spare /dev entry to stand in for a GPU device node")
    monkeypatch.setattr(policy_module.glob, "glob", lambda pattern: [])  # /dev is not listable here
    monkeypatch.setenv(policy_module.DEVICES_ENV, os.pathsep.join(["/dev/null", gpu_node, "/home/x"]))
    applied = []

    def confine(policy, mode):
        applied.append(policy)
        return SandboxReport(mode, "stub")

    monkeypatch.setattr(sandbox, "confine", confine)
    job = WorkerJob("task", "code", tmp_path / "result.json", EvalSettings(sandbox="auto"),
                    build_entries=(str(tmp_path),))
    assert confine_candidate(job, tmp_path / "cache").startswith("stub")
    assert applied[0].devices == ("/dev/null", gpu_node)  # only /dev paths, as the parent listed them
