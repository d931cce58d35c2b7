"""The real evaluator: static checks, parallel compile, then isolated GPU runs one at a time.

``CudaEvaluator.evaluate`` turns every candidate into a ``Verdict`` (failures are data), reports
verdicts and queue sizes as they change, and honours ``cancel`` between candidates (a running
worker is killed). ``make_evaluator`` picks the real evaluator or the replay double.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import EvalSettings, Evaluator, QueueCallback, VerdictCallback
from kevin_agent.evaluate.build.cache import BuildCache, default_cache_root
from kevin_agent.evaluate.isolation import WorkerPool, WorkerResult
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.verdicts import (
    build_details,
    cancelled_verdict,
    compile_verdict,
    merge_build_details,
    static_verdict,
)

EVALUATOR_ENV = "KEVIN_EVALUATOR"

Settle = Callable[[int, Verdict], None]
Queue = Callable[[int, int], None]


class CudaEvaluator(Evaluator):
    """Judges candidates on this machine's nvcc and CUDA device.

    ``worker_command`` replaces ``python -m kevin_agent.evaluate.worker`` (tests); ``jobs`` caps
    parallel compiles (default: compile_many's choice).
    """

    def __init__(self, settings: EvalSettings = EvalSettings(), *,
                 worker_command: Optional[Sequence[str]] = None, jobs: Optional[int] = None) -> None:
        self.settings = settings
        self.worker_command = worker_command
        self.jobs = jobs
        self._cache: Optional[BuildCache] = None
        self._pool: Optional[WorkerPool] = None
        self._arch: Optional[str] = None
        self._lock = threading.Lock()
        self._gpu_lock = threading.Lock()  # one candidate on the GPU at a time, across callers
        self.gpu_name: Optional[str] = None
        self.last_worker_results: list[WorkerResult] = []  # of the latest batch (bench)

    @property
    def cache_dir(self) -> Path:
        return Path(self.settings.cache_dir or default_cache_root()).expanduser()

    def check_environment(self) -> None:
        """Raise EnvironmentProblem now (no CUDA torch, no nvcc, no device unless compile-only)."""
        from kevin_agent.evaluate.environment import check_environment, resolve_arch

        # a custom worker command (tests' stand-in workers) brings its own device requirement
        compile_only = self.settings.compile_only or self.worker_command is not None
        info = check_environment(compile_only=compile_only)
        self._arch = resolve_arch(self.settings.arch, info)
        self.gpu_name = info.gpu_name

    def _ensure_started(self) -> BuildCache:
        with self._lock:
            if self._cache is not None:
                return self._cache
            if self._arch is None:
                self.check_environment()
            os.environ["TORCH_CUDA_ARCH_LIST"] = self._arch or ""
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self._cache = BuildCache(self.cache_dir, arch=self._arch,
                                     timeout_s=self.settings.compile_timeout_s)
            if not self.settings.compile_only:
                self._pool = WorkerPool(self.worker_command, run_timeout_s=self.settings.run_timeout_s,
                                        extra_env={"TORCH_CUDA_ARCH_LIST": self._arch or ""})
            return self._cache

    def evaluate(
        self,
        task: Task,
        codes: Sequence[str],
        *,
        on_verdict: Optional[VerdictCallback] = None,
        on_queue: Optional[QueueCallback] = None,
        cancel: Optional[threading.Event] = None,
    ) -> list[Verdict]:
        """One verdict per code, in order; cancelled candidates get a ``cancelled`` placeholder."""
        verdicts: list[Optional[Verdict]] = [None] * len(codes)
        reached = [Stage.FORMAT] * len(codes)  # last stage passed, for cancelled placeholders
        cancel = cancel or threading.Event()

        def settle(index: int, verdict: Verdict) -> None:
            verdicts[index] = verdict
            if on_verdict is not None:
                on_verdict(index, verdict)

        def queue(compiling: int, timing: int) -> None:
            if on_queue is not None:
                on_queue(compiling, timing)

        survivors = self._static(task, codes, settle)
        for index in survivors:
            reached[index] = Stage.STATIC
        if survivors and not cancel.is_set():
            cache = self._ensure_started()
            if self._pool is not None:
                self._pool.start_spare()  # torch import + CUDA init overlap the compiles
            queue(len(survivors), 0)
            compiled = self._compile(cache, codes, survivors, settle)
            for index, _ in compiled:
                reached[index] = Stage.COMPILE
            queue(0, len(compiled))
            self._run_on_gpu(task, codes, compiled, settle, queue, cancel)
        return [v if v is not None else cancelled_verdict(reached[i]) for i, v in enumerate(verdicts)]

    @staticmethod
    def _static(task: Task, codes: Sequence[str], settle: Settle) -> list[int]:
        """Settle static failures; the indices that pass."""
        survivors = []
        for index, code in enumerate(codes):
            failed = static_verdict(code, task.source)
            if failed is not None:
                settle(index, failed)
            else:
                survivors.append(index)
        return survivors

    def _compile(self, cache: BuildCache, codes: Sequence[str], indices: list[int],
                 settle: Settle) -> list[tuple[int, VerdictDetails]]:
        """Compile in parallel; settle failures (and compile-only results); the rest go on."""
        from kevin_agent.evaluate.build.compile import compile_many

        outcomes = compile_many([codes[i] for i in indices], cache, jobs=self.jobs)
        compiled = []
        for index, outcome in zip(indices, outcomes):
            details = build_details(outcome)
            details.gpu_name = self.gpu_name
            if not outcome.ok or self.settings.compile_only:
                settle(index, compile_verdict(outcome, details))
            else:
                compiled.append((index, details))
        return compiled

    def _job(self, task: Task, code: str) -> WorkerJob:
        # the worker keys its build cache exactly as the parent did: same arch, same root
        settings = dataclasses.replace(self.settings, arch=self._arch, cache_dir=self.cache_dir)
        return WorkerJob(task.source, code, Path("unset"), settings, cache_dir=self.cache_dir)

    def _run_on_gpu(self, task: Task, codes: Sequence[str], compiled: list[tuple[int, VerdictDetails]],
                    settle: Settle, queue: Queue, cancel: threading.Event) -> None:
        self.last_worker_results = []
        if self._pool is None:
            return
        for done, (index, build) in enumerate(compiled):
            if cancel.is_set():
                return
            with self._gpu_lock:
                result = self._pool.run(self._job(task, codes[index]), cancel=cancel,
                                        start_next=done + 1 < len(compiled))
            self.last_worker_results.append(result)
            if result.cancelled:
                return
            if result.task_failure is not None:
                raise UserInputError(f"the reference task failed: {result.task_failure}")
            settle(index, merge_build_details(result.verdict, build))
            queue(0, len(compiled) - done - 1)

    def close(self) -> None:
        """Kill any spare or running worker."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def make_evaluator(spec: Optional[str], settings: EvalSettings = EvalSettings()) -> Evaluator:
    """``None``/"cuda" -> CudaEvaluator; "replay:PATH" -> ReplayEvaluator (spec from $KEVIN_EVALUATOR)."""
    spec = spec if spec is not None else os.environ.get(EVALUATOR_ENV) or None
    if spec is None or spec == "cuda":
        return CudaEvaluator(settings)
    if spec.startswith("replay:"):
        from kevin_agent.evaluate.replay import ReplayEvaluator

        return ReplayEvaluator(spec[len("replay:"):])
    raise UserInputError(f"unknown evaluator {spec!r}: use 'cuda' or 'replay:PATH'")


def open_evaluator(spec: Optional[str], settings: EvalSettings = EvalSettings()) -> Evaluator:
    """``make_evaluator``, then fail fast (one line) on a machine without what it needs."""
    evaluator = make_evaluator(spec, settings)
    evaluator.check_environment()
    return evaluator
