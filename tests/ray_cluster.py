"""A real, small Ray cluster on this machine for tests and the Ray benchmark.

Every node is a ``ray start --block`` process in its own session, so stopping a node (or killing
it, as a lost machine) means SIGKILL to exactly the processes of that session: its raylet, its
Ray workers and actors (and, on the head, the GCS and the client server). Nothing else on the
machine is touched. Nodes get their own build cache (``KEVIN_BUILD_CACHE``) and name
(``KEVIN_RAY_NODE_NAME``), like separate machines; "GPUs" are declared resources (``--num-gpus``),
there is no CUDA device here.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
# Ray 2.5x turns token auth on when a token sits in ~/.ray (a local ``ray.init`` writes one): the
# driver (this process) would then demand it from nodes that never send it. Explicitly off for the
# test cluster's nodes, the driver and every ``kevin`` process the tests start.
RAY_AUTH_MODE = "disabled"
RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 600.0  # a guard: a node starts in ~15 s on a busy 2-core machine
STANDIN_SCRIPT = "ray_standin.py"  # tests/workers/ray_standin.py, the stand-in GPU worker
STANDIN_STARTED = "ray-standin-started"  # its marker in its working folder once it took a job


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    cache: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None


def session_pids(sid: int) -> list[int]:
    """Every process of session ``sid`` (a node's ``ray start`` and all it started)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:
            found.append(int(stat.parent.name))
    return found


class LocalCluster:
    """``start()`` the head, ``add_node(...)`` more, ``kill(node)`` one, ``stop()`` all."""

    def __init__(self, extra_env: Optional[Mapping[str, str]] = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kray", dir="/tmp"))  # short: Ray's socket paths
        self.pid_dir = self.root / "pids"
        self.pid_dir.mkdir()
        self.gcs_port, self.client_port = free_port(), free_port()
        self.extra_env = dict(extra_env or {})
        self.nodes: list[Node] = []

    @property
    def address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "RAY_"))}
        env.update(self.extra_env)
        env["KEVIN_RAY_NODE_NAME"] = name
        env["KEVIN_BUILD_CACHE"] = str(self.root / f"cache-{name}")
        env["KEVIN_TEST_PID_DIR"] = str(self.pid_dir)
        env["TMPDIR"] = str(self._mkdir(self.root / f"tmp-{name}"))  # worker scratch, GPU leases: per "machine"
        # its own home: a Ray token in the user's ~/.ray (``ray get-auth-token --generate``) would make
        # the head demand it from nodes that, with token auth off, never send it
        env["HOME"] = str(self._mkdir(self.root / f"home-{name}"))
        env["RAY_AUTH_MODE"] = RAY_AUTH_MODE  # never token auth, whatever token a HOME holds
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
        env["RAY_health_check_period_ms"] = "1000"  # a killed node is noticed in seconds
        env["RAY_health_check_failure_threshold"] = "3"
        env["RAY_health_check_timeout_ms"] = "1000"
        return env

    @staticmethod
    def _mkdir(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _launch(self, name: str, args: list[str]) -> Node:
        log = self.root / f"{name}.log"
        common = ["--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                  f"--dashboard-agent-listen-port={free_port()}", "--object-store-memory=100000000"]
        with open(log, "w") as out:
            proc = subprocess.Popen([RAY, "start", *args, *common], env=self._env(name), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        node = Node(name, proc, self.root / f"cache-{name}", log)
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"ray node {name} did not start:\n{tail}")
            time.sleep(0.2)
        return node

    def start(self, num_cpus: int = 1, num_gpus: int = 0, name: str = "head") -> Node:
        return self._launch(name, ["--head", f"--port={self.gcs_port}", f"--ray-client-server-port={self.client_port}",
                                   f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--include-dashboard=false",
                                   f"--temp-dir={self.root}"])

    def add_node(self, name: str, num_cpus: int = 1, num_gpus: int = 1) -> Node:
        return self._launch(name, [f"--address=127.0.0.1:{self.gcs_port}", f"--num-cpus={num_cpus}",
                                   f"--num-gpus={num_gpus}"])

    def kill(self, node: Node) -> None:
        """The node's machine is gone: SIGKILL every process of its session."""
        for pid in session_pids(node.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            node.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def clear_pids(self) -> None:
        for path in self.pid_dir.iterdir():
            path.unlink()

    def pids(self, prefix: str) -> list[tuple[str, int]]:
        """(name, pid) of the files fake compiles (Ray tasks: the node's environment) wrote into
        the pid folder."""
        found = []
        for path in self.pid_dir.iterdir():
            if path.name.startswith(prefix):
                found.append((path.name, int(path.name.rsplit("-", 1)[1])))
        return found

    def running_standins(self, node: str) -> list[int]:
        """Host PIDs of this cluster's live stand-in workers running a job on ``node``: processes
        running the stand-in whose working folder (under this cluster's folder) holds its marker
        naming ``node``. Found through this host's /proc, so neither a worker's allow-listed
        environment nor a PID namespace it may start in hides it."""
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if len(argv) < 2 or not argv[1].endswith(STANDIN_SCRIPT.encode()):
                    continue
                cwd = Path(os.readlink(proc / "cwd"))
                if cwd.is_relative_to(self.root) and (cwd / STANDIN_STARTED).read_text() == node:
                    found.append(int(proc.name))
            except (OSError, ValueError):  # gone meanwhile, or no job taken yet
                continue
        return [pid for pid in found if pid_alive(pid)]

    def stop(self) -> None:
        """Stop every node this cluster started (workers first, the head last); remove its files."""
        for node in reversed(self.nodes):
            if node.alive():
                self.kill(node)
        self.nodes = []
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
