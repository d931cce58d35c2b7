"""The real evaluator: static checks, parallel compiles, then GPU stages spread over lanes.

``CudaEvaluator.evaluate`` turns every candidate into a ``Verdict`` (failures are data), reports
verdicts and queue sizes as they change, and honours ``cancel`` (a running worker is killed).
Compiles run in a thread pool; each compiled candidate goes to the first free lane (one per GPU,
``evaluate.lanes``). A task's baseline (eager and torch.compile) is measured once per GPU model
and reused; its torch.compile is built ahead, off the GPU's lease, while the candidates compile, for
the baseline job under the lease to load. ``make_evaluator`` picks the real evaluator or the replay
double.

The environment check, the compile of one candidate, where the lanes come from and a lane's thread
are parts one can hand in; the Ray evaluator (``evaluate.ray_lanes``) is this pipeline with its
cluster's parts, used through its public methods only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Optional

from kevin_agent.data import Stage, Task, Verdict
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.api import (
    EVALUATOR_ENV,
    EvalSettings,
    Evaluator,
    QueueCallback,
    VerdictCallback,
    WaitCallback,
)
from kevin_agent.evaluate.baselines import BaselineBook, Drift, baseline_key, drift
from kevin_agent.evaluate.build.cache import BuildCache, default_cache_root, entry_dir
from kevin_agent.evaluate.build.compile import CompileOutcome, compile_candidate
from kevin_agent.evaluate.build.usage import touch
from kevin_agent.evaluate.cache_upkeep import keep_under_cap, with_header_notices
from kevin_agent.evaluate.isolation import WorkerResult
from kevin_agent.evaluate.lanes import DeviceInfo, GpuLane, LocalLane, local_devices, run_limit
from kevin_agent.evaluate.protocol import Baseline, WorkerJob
from kevin_agent.evaluate.provenance.build_check import build_rejection
from kevin_agent.evaluate.scheduling import Batch, GpuItem, LaneQueue, Target
from kevin_agent.evaluate.verdicts import build_details, compile_verdict, merge_build_details, static_verdict

# one candidate's compile (its batch's cancel event), results in the cache
Compiler = Callable[[str, BuildCache, threading.Event], CompileOutcome]
LaneServer = Callable[[GpuLane, LaneQueue], None]  # a lane's thread: serve the lane from the queue
NINJA_JOBS_PER_BUILD = 2  # a build has two compile steps (kernels, wrapper) that can overlap
DRIFT_AFTER_S = 120.0  # a baseline measured this long ago or more is measured again at a run's end
AHEAD_AT_ONCE = 4  # compile-ahead jobs (a worker each, torch.compile of a new task's reference) at once


class CudaEvaluator(Evaluator):
    """Judges candidates with this machine's nvcc and its GPUs (or another place's, handed in).

    ``worker_command`` replaces ``python -m kevin_agent.evaluate.worker`` (tests); ``devices``
    replaces the detected GPUs (tests: fake devices with stand-in workers); ``compiler`` replaces
    the local compile of one candidate (it must leave the built entries in this evaluator's cache);
    ``jobs`` caps parallel compiles (default: one per CPU core); ``spares`` worker processes wait
    ready on each lane. Another place (a Ray cluster) hands in ``environment`` (checks it, says
    what to build for, may open the lanes), ``open_lanes`` (the lanes when none are open) and
    ``serve`` (a lane's thread, default ``serve``).
    """

    def __init__(self, settings: Optional[EvalSettings] = None, *,
                 worker_command: Optional[Sequence[str]] = None, jobs: Optional[int] = None,
                 devices: Optional[Sequence[DeviceInfo]] = None, compiler: Optional[Compiler] = None,
                 spares: int = 3, environment: Optional[Callable[[], Target]] = None,
                 open_lanes: Optional[Callable[[], Sequence[GpuLane]]] = None,
                 serve: Optional[LaneServer] = None) -> None:
        self.settings = settings if settings is not None else EvalSettings()
        self.worker_command = worker_command
        self.jobs = jobs or max(1, os.cpu_count() or 2)
        self.spares = spares
        self._devices = list(devices) if devices is not None else None
        self._lanes: list[GpuLane] = []
        self._compiler = compiler or local_compile
        self._local_compiles = compiler is None
        self._environment = environment
        self._open_lanes = open_lanes
        self._serve = serve or self.serve
        self._protect: tuple[str, ...] = ()
        self._cache: Optional[BuildCache] = None
        self._arch: Optional[str] = None
        self._lock = threading.Lock()
        self._compiles: Optional[ThreadPoolExecutor] = None
        self._queue = LaneQueue()
        self._threads: list[threading.Thread] = []
        self._book = BaselineBook(None)
        # (task, gpu) -> the lane and baseline used, and when this evaluator measured it (None: stored)
        self._used: dict[tuple[str, str], tuple[GpuLane, Baseline, Optional[float]]] = {}
        self._ahead: dict[str, Future[Optional[WorkerResult]]] = {}  # task source -> its compile-ahead job
        self._aheads: Optional[ThreadPoolExecutor] = None
        self.gpu_name: Optional[str] = None
        self._notices: Optional[WaitCallback] = None  # the latest batch's on_wait: the cache's notices go there
        self.last_worker_results: deque[WorkerResult] = deque(maxlen=4096)  # the latest jobs (bench)
        self.last_baseline_results: deque[WorkerResult] = deque(maxlen=256)  # the latest baseline jobs (bench)
        self.last_ahead_results: deque[WorkerResult] = deque(maxlen=256)  # the latest compile-ahead jobs (bench)

    @property
    def cache_dir(self) -> Path:
        return Path(self.settings.cache_dir or default_cache_root()).expanduser()

    @property
    def lanes(self) -> list[GpuLane]:
        return list(self._lanes)

    def check_environment(self) -> None:
        """Raise EnvironmentProblem now (no CUDA torch, no nvcc, no device unless compile-only;
        or what the handed-in ``environment`` finds)."""
        target = self._environment() if self._environment is not None else self._local_target()
        self._arch, self.gpu_name = target.arch, target.gpu_name
        self.jobs = target.jobs or self.jobs
        if not self._lanes:
            self._lanes = list(target.lanes)

    def _local_target(self) -> Target:
        from kevin_agent.evaluate.environment import check_environment, resolve_arch

        # stand-in workers, given devices or lanes already open bring their own device requirement
        brought = self.worker_command is not None or self._devices is not None or bool(self._lanes)
        info = check_environment(compile_only=self.settings.compile_only or brought)
        return Target(resolve_arch(self.settings.arch, info), info.gpu_name)

    # -- start-up ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the compile pool and the lanes now, or top the lanes' ready workers up (a batch's
        last job starts none beside its timing)."""
        self._ensure_started()
        for lane in self.lanes:
            lane.warm()

    def _ensure_started(self) -> BuildCache:
        with self._lock:
            if self._cache is not None:
                return self._cache
            if self._arch is None:
                self.check_environment()
            os.environ["TORCH_CUDA_ARCH_LIST"] = self._arch or ""
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self._cache = BuildCache(self.cache_dir, arch=self._arch, timeout_s=self.settings.compile_timeout_s,
                                     ninja_jobs=NINJA_JOBS_PER_BUILD)
            self._cache.sandbox = self._sandbox_mode()
            from kevin_agent.paths import protected_paths

            self._protect = tuple(protected_paths())
            self._compiles = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="kevin-compile")
            if self._local_compiles:  # compiles elsewhere need no local header
                self._compiles.submit(self._upkeep, self._cache)  # the shared torch header, while candidates arrive
            self._book = BaselineBook(self.cache_dir / "baselines", fresh=self.settings.fresh_baselines)
            if not self.settings.compile_only:
                self._aheads = ThreadPoolExecutor(max_workers=AHEAD_AT_ONCE, thread_name_prefix="kevin-compile-ahead")
                self._start_lanes()
            return self._cache

    def _upkeep(self, cache: BuildCache) -> None:
        """The shared header (said out loud when it is being built now), then the cache's size cap."""
        from kevin_agent.config import cache_max_bytes
        from kevin_agent.errors import KevinError

        with_header_notices(cache.warm, self._notice)
        try:
            cap: Optional[int] = cache_max_bytes()
        except KevinError as err:
            self._notice(f"build cache: {err}; nothing evicted")
            cap = None
        keep_under_cap(cache.root, cap, self._notice)

    def _notice(self, text: str) -> None:
        """A line about the evaluator's own work, where the caller shows waits (else stderr)."""
        say = self._notices
        if say is not None:
            say(text)
        else:
            print(f"kevin: {text}", file=sys.stderr, flush=True)

    def _start_lanes(self) -> None:
        if not self._lanes:
            self._lanes = list(self._open_lanes()) if self._open_lanes is not None else self._local_lanes()
        self.gpu_name = self.gpu_name or self._lanes[0].device.name
        self._queue = lane_queue = LaneQueue()  # each start's own: nothing of an earlier close is left in it
        for lane in self._lanes:
            lane.warm()  # torch import + CUDA init overlap the compiles
            thread = threading.Thread(target=self._serve, args=(lane, lane_queue), name=f"kevin-lane-{lane.name}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def _local_lanes(self) -> list[GpuLane]:
        devices = self._devices if self._devices is not None else local_devices()
        if not devices:
            raise EnvironmentProblem("no CUDA device is visible to evaluate on")
        env = {"TORCH_CUDA_ARCH_LIST": self._arch or ""}
        return [LocalLane(d, self.settings, worker_command=self.worker_command, extra_env=env,
                          spares=self.spares, cache_dir=self.cache_dir) for d in devices]

    def _sandbox_mode(self) -> SandboxMode:
        """Probe the kernel's confinement once; say plainly when there is none (or refuse, when
        it is required). The mode the children get."""
        mode = self.settings.sandbox
        if mode == "off":
            return mode
        from kevin_agent.evaluate.sandbox import probe

        support = probe()
        if not support.available:
            if mode == "required":
                raise EnvironmentProblem(f"sandbox = \"required\" but this host cannot confine: {support.reason}")
            print(f"kevin: sandbox: none ({support.reason}); model-written code runs unconfined",
                  file=sys.stderr, flush=True)
        return mode

    # -- one batch -----------------------------------------------------------------------------

    def evaluate(
        self,
        task: Task,
        codes: Sequence[str],
        *,
        on_verdict: Optional[VerdictCallback] = None,
        on_queue: Optional[QueueCallback] = None,
        cancel: Optional[threading.Event] = None,
        on_wait: Optional[WaitCallback] = None,
    ) -> list[Verdict]:
        """One verdict per code, in order; cancelled candidates get a ``cancelled`` placeholder."""
        batch = Batch(task, codes, cancel or threading.Event(), on_verdict, on_queue, on_wait)
        survivors = []
        for index, code in enumerate(codes):
            failed = static_verdict(code, task.source)
            if failed is not None:
                batch.settle(index, failed)
            else:
                batch.reached[index] = Stage.STATIC
                survivors.append(index)
        if survivors and not batch.cancel.is_set():
            self._notices = on_wait or self._notices
            self._ensure_started()
            if not self.settings.compile_only:  # a lane measures the task's baseline while the builds run
                self._queue_baseline(batch)
            batch.count(compiling=len(survivors))
            for index in survivors:
                future = self._submit_compile(codes[index], batch.cancel)
                future.add_done_callback(functools.partial(self._compiled, batch, index))
        return batch.wait()

    def _submit_compile(self, code: str, cancel: threading.Event) -> Future[CompileOutcome]:
        assert self._compiles is not None and self._cache is not None
        return self._compiles.submit(self._compiler, code, self._cache, cancel)

    def _compiled(self, batch: Batch, index: int, done: Future[CompileOutcome]) -> None:
        """A compile finished: settle a failure (or a compile-only result), else queue for a lane."""
        try:
            outcome = done.result()
        except BaseException as err:  # an evaluator bug: the batch fails with it
            batch.fail(err)
            return
        details = build_details(outcome)
        if self._cache is not None:  # used now: last in line for eviction
            touch(entry_dir(self._cache.root, r.key) for r in outcome.results if r.key)
        details.environment.gpu_name = self.gpu_name
        if not outcome.ok or self.settings.compile_only:
            batch.count(compiling=-1)
            batch.settle(index, compile_verdict(outcome, details))
            return
        batch.reached[index] = Stage.COMPILE
        rejected = build_rejection(outcome.results, self.settings.policy, details)  # decided before any GPU stage
        if rejected is not None:
            batch.count(compiling=-1)
            batch.settle(index, rejected)
            return
        assert self._cache is not None
        entries = [entry_dir(self._cache.root, r.key) for r in outcome.results if r.key]
        batch.count(compiling=-1, on_gpu=1)
        self._queue.put(GpuItem(batch, index, batch.codes[index], details, entries))

    # -- the baseline's torch.compile, built ahead -----------------------------------------------

    def _queue_baseline(self, batch: Batch) -> None:
        """Queue the task's baseline for a lane; where its torch.compile is being built ahead, once
        that build ended (so no lane waits for it)."""
        lane_queue, item = self._queue, GpuItem.baseline_for(batch)
        ahead = self._start_compile_ahead(batch)
        if ahead is None:
            lane_queue.put(item)
        else:
            ahead.add_done_callback(lambda _: lane_queue.put(item))

    def _start_compile_ahead(self, batch: Batch) -> Optional[Future[Optional[WorkerResult]]]:
        """The task's compile-ahead job (started now, once per task), on the first lane that is up
        and lacks its baseline; None when torch.compile is not timed or every baseline is known."""
        task = batch.task
        if not self.settings.with_torch_compile or self._aheads is None:
            return None
        lane = next((one for one in self._lanes if one.up and not self._book.knows(self._baseline_key(one, task))),
                    None)
        if lane is None:
            return None
        with self._lock:
            future = self._ahead.get(task.source)
            if future is None:
                future = self._aheads.submit(self._compile_ahead, lane, task, batch.cancel)
                self._ahead[task.source] = future
        return future

    def _compile_ahead(self, lane: GpuLane, task: Task, cancel: threading.Event) -> Optional[WorkerResult]:
        """Build torch.compile of the task's reference on ``lane`` without its lease (None when the
        lane cannot, or it failed: the baseline job then builds it under the lease, as before)."""
        job = WorkerJob(task.source, "", Path("unset"), self._job_settings(), cache_dir=self.cache_dir,
                        compile_ahead=True)
        try:
            result = lane.compile_ahead(job, cancel=cancel)
        except Exception as err:  # no worker started: nothing lost but the head start
            print(f"kevin: torch.compile of the reference was not built ahead ({err}); the baseline job builds it",
                  file=sys.stderr, flush=True)
            return None
        if result is not None:
            self.last_ahead_results.append(result)
        return result

    def _await_compile_ahead(self, task: Task, cancel: threading.Event) -> None:
        """Before a baseline job: let the task's running compile-ahead job end (the baseline job
        loads its build); one not started yet is dropped (the baseline job builds it itself)."""
        with self._lock:
            future = self._ahead.get(task.source)
        if future is None or future.cancel():
            return
        while not cancel.is_set() and not wait([future], timeout=0.05).done:
            pass

    # -- the lanes ---------------------------------------------------------------------------------

    def serve(self, lane: GpuLane, lane_queue: LaneQueue) -> None:
        """A lane's thread: take compiled candidates from ``lane_queue`` until it is stopped."""
        while True:
            item = lane_queue.get()
            if item is None:
                return
            batch = item.batch
            try:
                if not batch.cancel.is_set() and batch.error is None:
                    self.run_item(lane, item)
            except BaseException as err:  # the task fails, or a worker cannot start: the batch ends
                batch.fail(err)
            finally:
                item.left_lanes()

    def run_item(self, lane: GpuLane, item: GpuItem) -> None:
        """Run one compiled candidate on ``lane`` (its task's baseline first, when unknown there)
        and settle its verdict; or, for a ``baseline_only`` item, measure the baseline unless its
        batch has ended. Returns early when its batch is cancelled. Errors propagate."""
        batch = item.batch
        if item.baseline_only:
            if not batch.finished.is_set():
                self._baseline(lane, batch, claim=False)
            return
        baseline, cached = self._baseline(lane, batch)
        if baseline is None:
            return  # cancelled while measuring
        job = WorkerJob(batch.task.source, item.code, Path("unset"), self._job_settings(),
                        cache_dir=self.cache_dir, baseline=baseline,
                        build_entries=tuple(str(e) for e in item.entries), protect=self._protect)
        result = lane.run(job, build_entries=item.entries, cancel=batch.cancel,
                          timeout_s=run_limit(self.settings, baseline), on_wait=batch.on_wait,
                          last=self._queue.empty())
        self.last_worker_results.append(result)
        if result.cancelled:
            return
        if result.task_failure is not None:
            raise UserInputError(f"the reference task failed: {result.task_failure}")
        result.verdict.details.timing.baseline_cached = cached
        result.verdict.details.timing.baseline_seconds = None if cached else baseline.measured_seconds
        batch.settle(item.index, merge_build_details(result.verdict, item.build))

    def _job_settings(self) -> EvalSettings:
        # the worker keys its build cache exactly as the parent did: same arch, same root
        return dataclasses.replace(self.settings, arch=self._arch, cache_dir=self.cache_dir)

    def _baseline(self, lane: GpuLane, batch: Batch, claim: bool = True) -> tuple[Optional[Baseline], bool]:
        """The task's baseline on this lane's GPU model: remembered, stored, or measured now; and
        whether it was reused (remembered or stored) rather than measured for this caller (a
        measurement ahead, ``claim=False``, is reported to the first candidate that claims it)."""
        task = batch.task
        key = self._baseline_key(lane, task)
        on_wait = batch.on_wait
        baseline, cached = self._book.get_or_measure(
            key, lambda: self._measure(lane, task, batch.cancel, on_wait), claim=claim, cancel=batch.cancel,
            on_wait=on_wait, label=f"the measurement of this task's baseline on {lane.device.name}")
        if baseline is not None:
            measured_at = None if cached else time.monotonic()
            self._used.setdefault((task.source, lane.device.name), (lane, baseline, measured_at))
        return baseline, cached

    def _baseline_key(self, lane: GpuLane, task: Task) -> str:
        device = lane.device
        return baseline_key(task.source, device.name, device.torch_version, self.settings, device.cuda_version)

    def _measure(self, lane: GpuLane, task: Task, cancel: threading.Event,
                 on_wait: Optional[WaitCallback]) -> Optional[Baseline]:
        self._await_compile_ahead(task, cancel)
        job = WorkerJob(task.source, "", Path("unset"), self._job_settings(), cache_dir=self.cache_dir,
                        measure_baseline=True)
        result = lane.run(job, cancel=cancel, on_wait=on_wait, last=False)
        self.last_baseline_results.append(result)
        if result.cancelled:
            return None
        if result.task_failure is not None:
            raise UserInputError(f"the reference task failed: {result.task_failure}")
        if result.baseline is None:
            raise UserInputError(f"timing the reference module failed: {result.verdict.details.error or 'no result'}"
                                 .splitlines()[0])
        return result.baseline

    def remeasure(self, task: Task) -> list[Drift]:
        """Measure the task's baselines again (each GPU model used, on a lane of that model that is
        up now; a model with none is skipped); how far they moved. A baseline this evaluator measured
        itself less than ``DRIFT_AFTER_S`` ago is not measured again: nothing drifts in that time, and
        a one-answer run (``kevin bench --replies``) would pay one more GPU job per task for nothing."""
        drifts = []
        now = time.monotonic()
        for (source, gpu), (first, used, measured_at) in list(self._used.items()):
            if source != task.source or (measured_at is not None and now - measured_at < DRIFT_AFTER_S):
                continue
            lane = next((one for one in (first, *self._lanes) if one.up and one.device.name == gpu), None)
            if lane is None:
                continue
            fresh = self._measure(lane, task, threading.Event(), None)
            if fresh is not None:
                drifts.append(drift(used, fresh))
                self._book.put(self._baseline_key(lane, task), fresh)
        return drifts

    def close(self) -> None:
        """Stop the lanes (kill their workers) and the compile pool."""
        with self._lock:
            lanes, self._lanes = self._lanes, []
            threads, self._threads = self._threads, []
            compiles, self._compiles = self._compiles, None
            aheads, self._aheads = self._aheads, None
            self._ahead = {}
            self._cache = None
        self._queue.stop(len(threads))
        for lane in lanes:
            lane.close()
        for pool in (compiles, aheads):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)


def local_compile(code: str, cache: BuildCache, cancel: threading.Event) -> CompileOutcome:
    """This machine's compile of one candidate (a build that has started runs to its end)."""
    return compile_candidate(code, cache)


def make_evaluator(spec: Optional[str], settings: Optional[EvalSettings] = None) -> Evaluator:
    """``None``/"cuda" -> CudaEvaluator (on a Ray cluster when ``settings.cluster`` says so);
    "replay:PATH" -> ReplayEvaluator (spec from $KEVIN_EVALUATOR). No settings: the defaults, made
    now (their build limit reads the environment, never at import)."""
    settings = settings if settings is not None else EvalSettings()
    spec = spec if spec is not None else os.environ.get(EVALUATOR_ENV) or None
    if (spec is None or spec == "cuda") and settings.cluster:
        from kevin_agent.evaluate.ray_lanes import ray_evaluator  # Ray is imported only here

        return ray_evaluator(settings, CudaEvaluator)  # its pipeline, handed in: ray_lanes never imports this module
    if spec is None or spec == "cuda":
        return CudaEvaluator(settings)
    if spec.startswith("replay:"):
        from kevin_agent.evaluate.replay import ReplayEvaluator

        return ReplayEvaluator(spec[len("replay:"):])
    raise UserInputError(f"unknown evaluator {spec!r}: use 'cuda' or 'replay:PATH'")


def open_evaluator(spec: Optional[str], settings: Optional[EvalSettings] = None) -> Evaluator:
    """``make_evaluator``, then fail fast (one line) on a machine without what it needs."""
    evaluator = make_evaluator(spec, settings)
    evaluator.check_environment()
    return evaluator
