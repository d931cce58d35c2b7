"""A Ray head on this host for a test: one node declaring one GPU, with the build cache it is given.

Started as ``python -c`` on Ray's own CLI entry (a ``pip install --target`` of Ray, as on the GPU
host, puts no ``ray`` next to python3) in its own session, and stopped by SIGKILL to every process
of that session (its GCS, raylet, workers and actors). Used by tests/gpu/test_ray_gpu.py (the real
GPU stage) and its CPU stand-in, tests/test_ray_head_standin.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ray_cluster import RAY_AUTH_MODE, free_port, session_pids

REPO = Path(__file__).resolve().parents[1]
NODE = "gpu-host"
START_TIMEOUT_S = 120.0  # a guard: a head starts in ~5-15 s
# `ray start` through the installed package (a --target install has no `ray` next to python3)
RAY_CLI = "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"


def _head_env(cache: Path, home: Path, pythonpath: Sequence[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "RAY_"))}
    env.update(KEVIN_BUILD_CACHE=str(cache), KEVIN_RAY_NODE_NAME=NODE, HOME=str(home), RAY_AUTH_MODE=RAY_AUTH_MODE)
    # this checkout and wherever Ray was installed (gpu_session.sh: /tmp/site) for the node's workers
    paths = (str(REPO), *pythonpath, os.environ.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


@contextmanager
def ray_head(cache: Path, pythonpath: Sequence[str] = ()) -> Iterator[str]:
    """A Ray head on this host declaring one GPU, its build cache ``cache``, ``pythonpath`` added
    for its workers; its ray:// address."""
    root = Path(tempfile.mkdtemp(prefix="kray", dir="/tmp"))  # short: Ray's socket paths
    home = root / "home"
    home.mkdir()
    client_port, log = free_port(), root / "head.log"
    args = ["start", "--head", "--block", f"--port={free_port()}", f"--ray-client-server-port={client_port}",
            "--num-cpus=2", "--num-gpus=1", "--include-dashboard=false", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", f"--dashboard-agent-listen-port={free_port()}",
            f"--temp-dir={root}", "--object-store-memory=200000000"]
    env = _head_env(cache, home, pythonpath)
    with open(log, "w") as out:
        head = subprocess.Popen([sys.executable, "-c", RAY_CLI, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=root)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert head.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        yield f"ray://127.0.0.1:{client_port}"
    finally:
        for pid in session_pids(head.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        head.wait(timeout=30)
