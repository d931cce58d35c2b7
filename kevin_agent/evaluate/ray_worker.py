"""What runs on a Ray cluster's nodes for ``evaluate.ray_lanes``: a compile task and a GPU node.

``compile_on_node`` builds one candidate into the node's own build cache and returns the outcome
with the built entries packed as bytes. ``GpuNode`` is the body of the Ray actor that owns one GPU
of its node (``num_gpus=1``): a ``LocalLane`` there, so every candidate still runs in a fresh,
killable ``python -m kevin_agent.evaluate.worker`` process with a scrubbed environment, under the
node's cross-process GPU lease, exactly as on a local GPU. Ray is transport and placement only.

Build entries travel as bytes (``pack_entries`` / ``unpack_entries``) and land in each machine's
cache under the same key; nothing assumes a shared filesystem. This module is plain Python: the
``@ray.remote`` wrappers live in ``ray_lanes``, and Ray is imported here only inside a Ray worker.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.build.cache import (
    ENTRY_FOLDER,
    BuildCache,
    BuildResult,
    default_cache_root,
    entry_dir,
    read_result,
    rehome,
)
from kevin_agent.evaluate.build.compile import CompileOutcome, compile_candidate
from kevin_agent.evaluate.isolation import WorkerResult
from kevin_agent.evaluate.lanes import DeviceInfo, LocalLane
from kevin_agent.evaluate.protocol import WorkerJob

NODE_NAME_ENV = "KEVIN_RAY_NODE_NAME"  # optional: how verdicts name this node (default: host name)
SKIPPED_IN_TRANSIT = (".o", ".ninja_log", ".ninja_deps")  # intermediates nobody loads
PROBE_TIMEOUT_S = 120.0

Compiler = Callable[[str, BuildCache], CompileOutcome]


# -- build entries as bytes ---------------------------------------------------------------------

def pack_entries(entries: Sequence[Path]) -> bytes:
    """The cache entries (``<root>/ext/<key>`` folders) as one tar.gz, each under its key; object
    files are left out (the built ``.so``, the sources, the log and ``result.json`` travel)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for entry in entries:
            entry = Path(entry)
            if not (entry / "result.json").is_file():
                continue
            for path in sorted(entry.rglob("*")):
                if path.is_file() and not path.name.endswith(SKIPPED_IN_TRANSIT):
                    tar.add(path, arcname=f"{entry.name}/{path.relative_to(entry)}", recursive=False)
    return buffer.getvalue()


def unpack_entries(blob: bytes, cache_root: Path) -> list[Path]:
    """Put packed entries into ``cache_root``'s ``ext`` folder under their keys (an entry already
    there is kept); ``result.json`` paths are rewritten to where the entry now lives."""
    if not blob:
        return []
    ext = entry_dir(cache_root, "")
    ext.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="unpack-", dir=_mkdir(Path(cache_root) / "tmp")))
    placed = []
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            _extract(tar, staging)
        for entry in sorted(p for p in staging.iterdir() if p.is_dir()):
            final = ext / entry.name
            if not (final / "result.json").is_file():
                _relocate_result(entry / "result.json", final)
                with contextlib.suppress(OSError):  # another process placed it first: same content
                    os.rename(entry, final)
            placed.append(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return placed


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")  # no absolute paths, links out or devices
        return
    for member in tar.getmembers():  # Python without extraction filters: files under ``into`` only
        target = (into / member.name).resolve()
        if not member.isfile() or not str(target).startswith(str(into.resolve()) + os.sep):
            raise EnvironmentProblem(f"refusing a packed build entry member {member.name!r}")
        tar.extract(member, into)


def _rehomed(result: BuildResult, cache_root: Path) -> BuildResult:
    """``result`` as it reads from ``cache_root``'s entry of its key (built in another cache)."""
    marker = f"{os.sep}{ENTRY_FOLDER}{os.sep}{result.key}"
    for value in (result.log_path, result.module_path):
        if result.key and value and marker in value:
            return rehome(result, value.split(marker, 1)[0] + marker, entry_dir(cache_root, result.key))
    return result


def _relocate_result(path: Path, final: Path) -> None:
    """Rewrite the absolute paths in an entry's result.json from its old root to ``final``."""
    stored = read_result(path.parent)
    if stored is not None:
        stored.key = stored.key or final.name  # entries from before results recorded their key
        moved = _rehomed(stored, final.parent.parent)
        path.write_text(json.dumps(dataclasses.asdict(moved)))


def relocate_outcome(outcome: CompileOutcome, cache_root: Path) -> CompileOutcome:
    """The outcome as it reads from ``cache_root`` (its entries were unpacked there)."""
    outcome.results = [_rehomed(result, cache_root) for result in outcome.results]
    return outcome


def entry_dirs(outcome: CompileOutcome, cache_root: Path) -> list[Path]:
    return [entry_dir(cache_root, r.key) for r in outcome.results
            if r.key and (entry_dir(cache_root, r.key) / "result.json").is_file()]


# -- the compile task ---------------------------------------------------------------------------

def node_cache_root() -> Path:
    """This node's build cache: ``$KEVIN_BUILD_CACHE`` or ``~/.cache/kevin-agent/build``."""
    return default_cache_root().expanduser()


def node_label() -> str:
    return os.environ.get(NODE_NAME_ENV) or socket.gethostname()


def load_compiler(reference: Optional[str]) -> Compiler:
    """``compile_candidate``, or the ``module:function`` a test names instead."""
    if not reference:
        return compile_candidate
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def toolchain_fingerprint(cache: BuildCache) -> Optional[str]:
    """What a cache key depends on besides the sources (None on a node without a toolchain)."""
    try:
        return json.dumps(cache.toolchain.fingerprint(), sort_keys=True)
    except EnvironmentProblem:
        return None


def compile_on_node(code: str, arch: str, timeout_s: float, ninja_jobs: int,
                    compiler: Optional[str] = None, cache_root: Optional[str] = None) -> dict[str, Any]:
    """Build one candidate into this node's cache: the outcome, the packed entries, where it ran.

    Runs as a Ray task; a cancel (KeyboardInterrupt from ``ray.cancel``) kills the builds it started.
    """
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch or ""
    root = Path(cache_root) if cache_root else node_cache_root()
    cache = BuildCache(root, arch=arch or None, timeout_s=timeout_s, ninja_jobs=ninja_jobs)
    started = time.monotonic()
    outcome = _cancellable(lambda: load_compiler(compiler)(code, cache), root)
    return {"outcome": outcome, "blob": pack_entries(entry_dirs(outcome, root)), "node": node_label(),
            "fingerprint": toolchain_fingerprint(cache), "seconds": time.monotonic() - started}


def _cancellable(build: Callable[[], CompileOutcome], root: Path) -> CompileOutcome:
    """Run ``build`` in a thread while this (main) thread stays where Ray's cancel reaches it: on
    KeyboardInterrupt the builds are killed, and the failures the kill caused leave the cache.
    (An Event, not Thread.join: an interrupted join marks a running thread as stopped.)"""
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["outcome"] = build()
        except BaseException as err:  # handed to the main thread
            box["error"] = err
        finally:
            done.set()

    threading.Thread(target=work, name="kevin-node-compile", daemon=True).start()
    try:
        while not done.wait(0.1):
            pass
    except KeyboardInterrupt:
        _stop_build(done, box, root)
        raise
    if "error" in box:
        raise box["error"]
    return box["outcome"]


def _stop_build(done: threading.Event, box: dict[str, Any], root: Path) -> None:
    """Kill the builds, wait for the build thread, drop the entries the kill made fail (Ray may
    interrupt again meanwhile: each interrupt kills again)."""
    deadline = time.monotonic() + 30
    kill_children()
    while not done.is_set() and time.monotonic() < deadline:
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            kill_children()
    for result in getattr(box.get("outcome"), "results", []):
        if not result.ok and result.key:  # failed because it was killed: not the candidate's doing
            while True:
                try:
                    shutil.rmtree(entry_dir(root, result.key), ignore_errors=True)
                    break
                except KeyboardInterrupt:
                    continue


def kill_children() -> None:
    """SIGKILL what this process started (ninja and its compilers: each its own process group)."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid, pgid = int(stat.parent.name), int(fields[1]), int(fields[2])
        if ppid == me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pgid == pid:
                    os.killpg(pgid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)


# -- the GPU node -------------------------------------------------------------------------------

@dataclass
class JobState:
    """What the client may ask about a running job: why it waits, whether it holds the GPU."""

    cancel: threading.Event = field(default_factory=threading.Event)
    waiting: Optional[str] = None
    running_since: Optional[float] = None

    def wait(self, message: str) -> None:
        self.waiting = message

    def start(self) -> None:
        """The wait for the GPU's lease ended."""
        self.waiting, self.running_since = None, time.time()


class GpuNode:
    """One GPU of this node, run as a Ray actor with ``num_gpus=1`` (Ray picks the GPU and sets
    CUDA_VISIBLE_DEVICES). ``worker_command`` replaces the GPU worker (tests: a stand-in, and then a
    node without a CUDA device offers a "stand-in" device). A node that cannot serve says why in
    ``describe`` (an exception in ``__init__`` would only read as a dead actor)."""

    def __init__(self, settings: EvalSettings, arch: str, *, worker_command: Optional[Sequence[str]] = None,
                 spares: int = 1, compiler: Optional[str] = None) -> None:
        self.settings, self.arch, self.compiler = settings, arch, compiler
        self.cache_root = node_cache_root()
        self._jobs: dict[str, JobState] = {}
        # cancels that arrived before their job's run (a threaded actor may take calls out of order)
        self._early_cancels: collections.deque[str] = collections.deque(maxlen=256)
        self._lock = threading.Lock()
        self.problem: Optional[EnvironmentProblem] = None  # said by describe(): a failed __init__ only kills
        try:
            self.device, self.capability = detect_device(fake_allowed=worker_command is not None)
        except EnvironmentProblem as problem:
            self.problem = problem
            return
        env = {"TORCH_CUDA_ARCH_LIST": arch or "", NODE_NAME_ENV: node_label()}  # the worker's env is allow-listed
        self.scratch = scratch_root()
        self.lane = LocalLane(self.device, settings, worker_command=worker_command, extra_env=env, spares=spares,
                              scratch_root=self.scratch, cache_dir=self._cache().root)  # confined as locally
        self.fingerprint = toolchain_fingerprint(self._cache())

    def describe(self) -> dict[str, Any]:
        """What the client needs to know of this GPU; the node's one-line problem, raised."""
        if self.problem is not None:
            raise self.problem
        return {"device": dataclasses.asdict(self.device), "capability": self.capability,
                "fingerprint": self.fingerprint, "cache": str(self.cache_root), "pid": os.getpid()}

    def warm(self) -> None:
        self.lane.warm()

    def run(self, job_id: str, job: WorkerJob, blob: Optional[bytes], timeout_s: Optional[float],
            last: bool, build_here: bool = False) -> WorkerResult:
        """One worker job on this GPU; its build entries (``blob``) go into this node's cache first,
        or with ``build_here`` (another toolchain built them) the candidate is built here."""
        state = JobState()
        with self._lock:
            self._jobs[job_id] = state
            if job_id in self._early_cancels:
                state.cancel.set()  # cancelled before it began: the pool answers "cancelled" at once
        try:
            entries = unpack_entries(blob, self.cache_root) if blob else []
            if build_here and job.candidate_source:
                outcome = load_compiler(self.compiler)(job.candidate_source, self._cache())
                if not outcome.ok:
                    return self._build_failed(outcome)
                entries = entry_dirs(outcome, self.cache_root)
            settings = dataclasses.replace(job.settings, cache_dir=self.cache_root, cluster=None)
            # the sandbox lets the candidate read only these: this node's entries, not the client's paths
            job = dataclasses.replace(job, settings=settings, cache_dir=self.cache_root,
                                      build_entries=tuple(str(e) for e in entries))
            return self.lane.run(job, cancel=state.cancel, timeout_s=timeout_s, on_wait=state.wait, last=last,
                                 on_hold=state.start)
        finally:
            with self._lock:
                self._jobs.pop(job_id, None)

    def _build_failed(self, outcome: CompileOutcome) -> WorkerResult:
        """The COMPILE verdict of a candidate that failed to build on this node."""
        from kevin_agent.evaluate.verdicts import build_details, compile_verdict

        return WorkerResult(compile_verdict(outcome, build_details(outcome)), os.getpid(), 0.0, None, False)

    def _cache(self) -> BuildCache:
        return BuildCache(self.cache_root, arch=self.arch or None, timeout_s=self.settings.compile_timeout_s,
                          ninja_jobs=2)

    def progress(self, job_id: str) -> dict[str, Any]:
        state = self._jobs.get(job_id)
        if state is None:
            return {"known": False}
        running = None if state.running_since is None else max(0.0, time.time() - state.running_since)
        return {"known": True, "waiting": state.waiting, "running_s": running}

    def cancel(self, job_id: str) -> bool:
        """Cancel the job; one whose ``run`` has not begun yet is cancelled when it does."""
        with self._lock:
            state = self._jobs.get(job_id)
            if state is None:
                self._early_cancels.append(job_id)
                return False
        state.cancel.set()
        return True

    def close(self) -> None:
        if self.problem is None:
            self.lane.close()
            shutil.rmtree(self.scratch, ignore_errors=True)


def scratch_root() -> Path:
    """This actor's folder for its workers' scratch folders, ``<tmp>/kevin-ray-workers/<pid>``;
    the folders of actors that died without closing (killed, their node's Ray stopped) go now."""
    parent = Path(tempfile.gettempdir()) / "kevin-ray-workers"
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.iterdir():
        if stale.name.isdigit() and not Path(f"/proc/{stale.name}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    folder = parent / str(os.getpid())
    folder.mkdir(exist_ok=True)
    return folder


def _visible_gpu_ids() -> list[str]:
    return [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]


def _node_id() -> str:
    try:
        import ray  # only ever inside a Ray worker

        return ray.get_runtime_context().get_node_id()
    except Exception:
        return socket.gethostname()


def detect_device(fake_allowed: bool) -> tuple[DeviceInfo, Optional[str]]:
    """The GPU Ray gave this actor (name, uuid, capability), probed in a child process so this
    long-lived actor never holds a CUDA context; a "stand-in" device where none exists and a
    stand-in worker was asked for."""
    ids = _visible_gpu_ids()
    physical = int(ids[0]) if ids and ids[0].isdigit() else 0
    found = _probe() if Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") else []
    if found:
        first = found[0]
        uuid = first["uuid"] or f"{node_label()}:{physical}"
        return DeviceInfo(first["name"], uuid, physical, node_label(), first["torch"]), first["capability"]
    if not fake_allowed:
        raise EnvironmentProblem(f"Ray node {node_label()} declares a GPU but no CUDA device is visible there")
    uuid = f"standin-{_node_id()[:12]}-gpu{ids[0] if ids else physical}"
    return DeviceInfo("stand-in", uuid, physical, node_label(), ""), None


_PROBE = """
import json, torch
out = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        out.append({"name": p.name, "uuid": f"GPU-{uuid}" if uuid is not None else "",
                    "capability": f"{p.major}.{p.minor}", "torch": torch.__version__})
print(json.dumps(out))
"""


def _probe() -> list[dict[str, Any]]:
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
        return list(json.loads(done.stdout.strip().splitlines()[-1])) if done.returncode == 0 else []
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return []


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
