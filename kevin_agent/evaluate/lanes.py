"""Lanes: one per GPU. A lane runs worker jobs (a candidate's GPU stages, or a task's baseline)
one at a time under the GPU's cross-process lease, each in a fresh, killable worker process. A
local lane also runs compile-ahead jobs (torch.compile of a baseline's reference, built into the
caches and never run) beside them, off the lease: compiles never hold the GPU.

``LocalLane`` is a GPU of this machine. A remote lane (``evaluate.ray_lanes.RayLane``) implements
the same ``GpuLane`` interface, so the evaluator's scheduler spreads candidates over both alike.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.api import EvalSettings, WaitCallback
from kevin_agent.evaluate.isolation import Confine, WorkerPool, WorkerResult
from kevin_agent.evaluate.lease import GpuLease
from kevin_agent.evaluate.protocol import Baseline, WorkerJob
from kevin_agent.evaluate.spares import spare_ceiling

RUN_LIMIT_FLOOR_S = 20.0  # process start-up, extension import, first forward
TRIALS_BUDGET = 160  # warm-up + timed + correctness runs, generously counted
SLOWDOWN_ALLOWED = 10.0  # a candidate may be this much slower than the reference before a hang


@dataclass(frozen=True)
class DeviceInfo:
    """A physical GPU: what verdicts record and what leases are keyed by."""

    name: str  # e.g. "NVIDIA H200"; speedups are compared only between equal names
    uuid: str  # e.g. "GPU-5d2c..."; the lease key
    index: int  # its index on its host
    host: str = ""
    torch_version: str = ""
    cuda_version: str = ""  # the CUDA torch was built with (part of a baseline's key)

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" on {self.host}" if self.host and self.host != socket.gethostname() else "")


def run_limit(settings: EvalSettings, baseline: Optional[Baseline]) -> float:
    """The time a candidate's GPU stage may take before it counts as hung: a floor plus every
    trial at ``SLOWDOWN_ALLOWED`` times the reference's time, capped by ``run_timeout_s``."""
    if baseline is None:
        return settings.run_timeout_s
    reference_ms = max(baseline.eager.median_ms, baseline.compiled.median_ms if baseline.compiled else 0.0)
    budget = RUN_LIMIT_FLOOR_S + TRIALS_BUDGET * SLOWDOWN_ALLOWED * reference_ms / 1000.0
    return min(settings.run_timeout_s, budget)


class GpuLane(ABC):
    """One GPU that runs worker jobs one at a time."""

    device: DeviceInfo
    up: bool = True  # it can take jobs now (a remote lane is not while its node is lost)

    @property
    def name(self) -> str:
        return f"cuda:{self.device.index}"

    @abstractmethod
    def run(self, job: WorkerJob, *, build_entries: Sequence[Path] = (),
            cancel: Optional[threading.Event] = None, timeout_s: Optional[float] = None,
            on_wait: Optional[WaitCallback] = None, last: bool = False) -> WorkerResult:
        """Run one job (``build_entries``: the cache entries its extensions were built into, for
        lanes on other machines). ``last``: no further job is queued, start no spare."""

    def compile_ahead(self, job: WorkerJob, *, cancel: Optional[threading.Event] = None,
                      timeout_s: Optional[float] = None) -> Optional[WorkerResult]:
        """Run a compile-ahead job now, off the lease and beside this lane's other jobs; None where
        the lane cannot (the baseline job then compiles under the lease)."""
        return None

    def warm(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Start worker processes ahead of the first job; nothing to warm by default."""

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Kill this lane's workers; nothing to close by default."""


class LocalLane(GpuLane):
    """A GPU of this machine: its own worker pool pinned to the device, and its lease."""

    def __init__(self, device: DeviceInfo, settings: EvalSettings, *,
                 worker_command: Optional[Sequence[str]] = None, extra_env: Optional[Mapping[str, str]] = None,
                 spares: int = 3, lease_folder: Optional[Path] = None,
                 cache_dir: Optional[Path] = None, scratch_root: Optional[Path] = None) -> None:
        self.device = device
        env = {**dict(extra_env or {}), "CUDA_VISIBLE_DEVICES": visible_device(device)}
        confine = None
        if worker_command is None and settings.sandbox != "off" and cache_dir is not None:
            confine = worker_confinement(settings.sandbox, cache_dir)
            env["CUDA_CACHE_PATH"] = str(cache_dir / "cuda-jit")
            env.update(granted_devices_env())
        self.pool = WorkerPool(worker_command, run_timeout_s=settings.run_timeout_s, extra_env=env,
                               spares=spares, max_spares=spare_ceiling(spares), confine=confine,
                               scratch_root=scratch_root, observe=settings.observe)
        self.lease = GpuLease(device.uuid, device.label, lease_folder)
        self._ahead_pools: set[WorkerPool] = set()  # compile-ahead jobs running or kept (closed with the lane)
        self._built: dict[str, WorkerPool] = {}  # task source -> the pool whose worker kept its build
        self._ahead_lock = threading.Lock()
        self._closed = False

    def compile_ahead(self, job: WorkerJob, *, cancel: Optional[threading.Event] = None,
                      timeout_s: Optional[float] = None) -> Optional[WorkerResult]:
        """The job in a worker of its own (confined as every worker, no judge), without the lease:
        it may run while another job holds the GPU. A worker that built stays for the task's
        baseline job (``run`` hands it over under the lease), so nothing is compiled under it."""
        base = self.pool
        pool = WorkerPool(base.command, run_timeout_s=base.run_timeout_s, spare=False, extra_env=base.extra_env,
                          confine=base.confine, scratch_root=base.scratch_root, judge=False,
                          on_start=base.count_start)  # its start sizes the candidates' spares
        with self._ahead_lock:
            if self._closed:
                return None
            self._ahead_pools.add(pool)
        kept = False
        try:
            result = pool.run(job, cancel=cancel, start_next=False, timeout_s=timeout_s, keep=True)
            kept = pool.has_kept
            return result
        except RuntimeError:  # the lane closed it before it ran: nothing to build for
            if self._closed:
                return None
            raise
        finally:
            with self._ahead_lock:
                kept = kept and not self._closed
                if kept:
                    self._built[job.task_source] = pool
                else:
                    self._ahead_pools.discard(pool)
            if not kept:
                pool.close()

    def run(self, job: WorkerJob, *, build_entries: Sequence[Path] = (),
            cancel: Optional[threading.Event] = None, timeout_s: Optional[float] = None,
            on_wait: Optional[WaitCallback] = None, last: bool = False,
            on_hold: Optional[Callable[[], None]] = None) -> WorkerResult:
        """As ``GpuLane.run``; ``on_hold`` hears when the wait for the GPU's lease ended (the job
        starts, or it was cancelled while waiting). A baseline job goes to the worker that built
        its task's torch.compile ahead, where one waits."""
        gate = lambda: self._gate(cancel, on_wait, on_hold)  # noqa: E731
        result = self._run_on_build(job, cancel, timeout_s, gate) if job.measure_baseline else None
        if result is None:
            result = self.pool.run(job, cancel=cancel, start_next=not last, timeout_s=timeout_s, gate=gate)
        where = result.verdict.details.environment
        where.lane = self.name
        where.gpu_uuid = where.gpu_uuid or self.device.uuid
        return result

    def _run_on_build(self, job: WorkerJob, cancel: Optional[threading.Event], timeout_s: Optional[float],
                      gate: Callable[[], contextlib.AbstractContextManager[bool]]) -> Optional[WorkerResult]:
        """The baseline job in the worker kept by its task's compile-ahead job; None where none waits,
        or where that worker ended without a baseline (lost, crashed: a fresh worker measures it)."""
        with self._ahead_lock:
            pool = self._built.pop(job.task_source, None)
        if pool is None:
            return None
        try:
            result = pool.run_kept(job, cancel=cancel, timeout_s=timeout_s, gate=gate)
            lost = result is not None and result.baseline is None and result.task_failure is None \
                and not result.cancelled
            return None if lost else result
        finally:
            with self._ahead_lock:
                self._ahead_pools.discard(pool)
            pool.close()

    @contextlib.contextmanager
    def _gate(self, cancel: Optional[threading.Event], on_wait: Optional[WaitCallback],
              on_hold: Optional[Callable[[], None]]) -> Iterator[bool]:
        with self.lease.hold(cancel, on_wait) as held:
            if on_hold is not None:
                on_hold()
            yield held

    def warm(self) -> None:
        self.pool.start_spare()

    def close(self) -> None:
        with self._ahead_lock:
            self._closed = True
            ahead = list(self._ahead_pools)
        for pool in (self.pool, *ahead):
            pool.close()


def worker_confinement(mode: SandboxMode, cache_dir: Path) -> Confine:
    """Start each GPU worker confined from its first instruction (``sandbox.startup_policy``):
    reads the system and the build cache, writes its job folder and the compile caches; the
    worker adds the candidate layer itself before any candidate code runs."""
    from kevin_agent.evaluate.sandbox import launch_command, startup_policy
    from kevin_agent.paths import protected_paths

    caches = [cache_dir / name for name in ("inductor", "triton", "speed-of-light", "cuda-jit")]
    for folder in caches:
        folder.mkdir(parents=True, exist_ok=True)
    protect = protected_paths()

    def confine(job_dir: Path, command: Sequence[str]) -> list[str]:
        """The worker's or the judge's command (``python -m MODULE``), confined."""
        policy = startup_policy(job_dir, cache_dir, extra_write=caches, protect=protect)
        module = command[list(command).index("-m") + 1] if "-m" in command else "kevin_agent.evaluate.worker"
        return launch_command(policy, [module], mode, module=True)

    return confine


def granted_devices_env() -> dict[str, str]:
    """The GPU device nodes, listed here where /dev is readable, for the worker's candidate layer
    (``sandbox.policy.DEVICES_ENV``): under its start-up layer the worker cannot list /dev."""
    from kevin_agent.evaluate.sandbox.policy import DEVICES_ENV, device_paths

    return {DEVICES_ENV: os.pathsep.join(device_paths(gpu=True))}


def visible_device(device: DeviceInfo) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a worker only this GPU."""
    if device.uuid.startswith("GPU-"):
        return device.uuid
    current = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return current[device.index] if device.index < len(current) else str(device.index)


def local_devices() -> list[DeviceInfo]:
    """Every CUDA device torch sees on this machine (none without a GPU)."""
    import torch

    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver reads as no device
        return []
    host = socket.gethostname()
    devices = []
    for index in range(count):
        properties = torch.cuda.get_device_properties(index)
        uuid = getattr(properties, "uuid", None)
        devices.append(DeviceInfo(properties.name, f"GPU-{uuid}" if uuid is not None else f"{host}:{index}",
                                  index, host, torch.__version__, torch.version.cuda or ""))
    return devices
