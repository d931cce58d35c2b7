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
from typing import Any, Optional, Sequence

from kevin_agent import feedback
from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.api import EvalSettings, Evaluator, QueueCallback, VerdictCallback

EVALUATOR_ENV = "KEVIN_EVALUATOR"


def cancelled_verdict(stage: Stage) -> Verdict:
    """Placeholder for a candidate the user cancelled before it was judged (not a real verdict)."""
    return Verdict(stage, False, "The evaluation was cancelled before this answer was judged.",
                   VerdictDetails(error="cancelled"))


def static_verdict(code: str, task_source: Optional[str] = None) -> Optional[Verdict]:
    """The STATIC failure for ``code``, or None when the static checks pass.

    ``task_source`` names the reference's classes, so using or subclassing any of them is caught.
    """
    from kevin_agent.evaluate.static.checks import check_candidate, format_violations

    violations = check_candidate(code, task_source)
    if not violations:
        return None
    text = format_violations(violations)
    text = text if len(violations) == 1 else "\n" + text
    return Verdict(Stage.STATIC, False, feedback.static_error(text),
                   VerdictDetails(static_rule=violations[0].rule))


def build_details(outcome: Any) -> VerdictDetails:
    """Build numbers of a CompileOutcome: total seconds, all cache hits, the failing/first log."""
    results = list(getattr(outcome, "results", []) or [])
    failing = next((r for r in results if not r.ok), None)
    shown = failing or (results[0] if results else None)
    return VerdictDetails(
        build_seconds=round(sum(r.seconds for r in results), 3) if results else None,
        cache_hit=all(r.cache_hit for r in results) if results else None,
        build_log_path=shown.log_path if shown else None,
        build_path=shown.path if shown else None,
        compiler_errors=failing.errors if failing else None,
    )


def merge_build_details(verdict: Verdict, build: VerdictDetails) -> Verdict:
    """Fill the build fields the worker left empty."""
    details = verdict.details
    for name in ("build_seconds", "cache_hit", "build_log_path", "build_path"):
        if getattr(details, name) is None:
            setattr(details, name, getattr(build, name))
    return verdict


def worker_settings(settings: EvalSettings) -> dict[str, Any]:
    """EvalSettings as JSON for the worker job."""
    raw = dataclasses.asdict(settings)
    return {k: str(v) if isinstance(v, Path) else v for k, v in raw.items()}


class CudaEvaluator:
    """Implements ``evaluate.api.Evaluator`` on this machine's nvcc and CUDA device.

    ``worker_command`` replaces ``python -m kevin_agent.evaluate.worker`` (tests); ``jobs`` caps
    parallel compiles (default: compile_many's choice).
    """

    def __init__(self, settings: EvalSettings = EvalSettings(), *, worker_command: Optional[Sequence[str]] = None,
                 jobs: Optional[int] = None) -> None:
        self.settings = settings
        self.worker_command = worker_command
        self.jobs = jobs
        self._cache: Any = None
        self._pool: Any = None
        self._arch: Optional[str] = None
        self._lock = threading.Lock()
        self._gpu_lock = threading.Lock()  # one candidate on the GPU at a time, across callers
        self.gpu_name: Optional[str] = None
        self.last_worker_results: list[Any] = []  # isolation.WorkerResult of the latest batch (bench)

    @property
    def cache_dir(self) -> Path:
        from kevin_agent.evaluate.build.cache import default_cache_root

        return Path(self.settings.cache_dir or default_cache_root()).expanduser()

    def check_environment(self) -> None:
        """Raise EnvironmentProblem now (no CUDA torch, no nvcc, no device unless compile-only)."""
        from kevin_agent.evaluate.environment import check_environment, resolve_arch

        # a custom worker command (tests' stand-in workers) brings its own device requirement
        info = check_environment(compile_only=self.settings.compile_only or self.worker_command is not None)
        self._arch = resolve_arch(self.settings.arch, info)
        self.gpu_name = info.gpu_name

    def _ensure_started(self) -> None:
        with self._lock:
            if self._cache is not None:
                return
            if self._arch is None:
                self.check_environment()
            os.environ["TORCH_CUDA_ARCH_LIST"] = self._arch or ""
            from kevin_agent.evaluate.build.cache import BuildCache

            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self._cache = BuildCache(self.cache_dir, arch=self._arch)
            if not self.settings.compile_only:
                from kevin_agent.evaluate.isolation import WorkerPool

                self._pool = WorkerPool(self.worker_command, run_timeout_s=self.settings.run_timeout_s,
                                        extra_env={"TORCH_CUDA_ARCH_LIST": self._arch or ""})

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

        def settle(index: int, verdict: Verdict) -> None:
            verdicts[index] = verdict
            if on_verdict is not None:
                on_verdict(index, verdict)

        def queue(compiling: int, timing: int) -> None:
            if on_queue is not None:
                on_queue(compiling, timing)

        def cancelled() -> bool:
            return cancel is not None and cancel.is_set()

        compiled: list[tuple[int, VerdictDetails]] = []
        survivors = []
        for index, code in enumerate(codes):
            failed = static_verdict(code, task.source)
            if failed is not None:
                settle(index, failed)
            else:
                reached[index] = Stage.STATIC
                survivors.append(index)
        if survivors and not cancelled():
            self._ensure_started()
            if self._pool is not None:
                self._pool.start_spare()  # torch import + CUDA init overlap the compiles
            queue(len(survivors), 0)
            compiled = self._compile(task, codes, survivors, settle)
            queue(0, len(compiled) if not self.settings.compile_only else 0)
            if not self.settings.compile_only:
                self._run_on_gpu(task, codes, compiled, settle, queue, cancelled, cancel)
        for index, _ in compiled:
            reached[index] = Stage.COMPILE
        return [v if v is not None else cancelled_verdict(reached[i]) for i, v in enumerate(verdicts)]

    def _compile(self, task: Task, codes: Sequence[str], indices: list[int], settle: Any) -> list[tuple[int, VerdictDetails]]:
        from kevin_agent.evaluate.build.compile import compile_many

        outcomes = compile_many([codes[i] for i in indices], self._cache, jobs=self.jobs)
        compiled = []
        for index, outcome in zip(indices, outcomes):
            details = build_details(outcome)
            details.gpu_name = self.gpu_name
            if not outcome.ok:
                message = outcome.message or feedback.compile_error(details.compiler_errors or "unknown error")
                settle(index, Verdict(Stage.COMPILE, False, message, details))
            elif self.settings.compile_only:
                settle(index, Verdict(Stage.COMPILE, True, feedback.compiled_only(), details))
            else:
                compiled.append((index, details))
        return compiled

    def _run_on_gpu(self, task: Task, codes: Sequence[str], compiled: list[tuple[int, VerdictDetails]],
                    settle: Any, queue: Any, cancelled: Any, cancel: Optional[threading.Event]) -> None:
        # the worker keys its build cache exactly as the parent did: same arch, same root
        settings = worker_settings(dataclasses.replace(self.settings, arch=self._arch, cache_dir=self._cache_root()))
        self.last_worker_results = []
        for done, (index, build) in enumerate(compiled):
            if cancelled():
                return
            job = {"task_source": task.source, "candidate_source": codes[index], "settings": settings,
                   "cache_dir": str(self._cache_root())}
            with self._gpu_lock:
                result = self._pool.run(job, cancel=cancel, start_next=done + 1 < len(compiled))
            self.last_worker_results.append(result)
            if result.cancelled:
                return
            _raise_if_task_failed(result)
            settle(index, merge_build_details(result.verdict, build))
            queue(0, len(compiled) - done - 1)

    def _cache_root(self) -> Path:
        return Path(getattr(self._cache, "root", self.cache_dir))

    def close(self) -> None:
        """Kill any spare or running worker."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> CudaEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


TASK_FAILED_EXIT = 4  # worker.EXIT_TASK: the reference module itself failed (not the candidate's fault)
TASK_FAILED_TEXT = "the reference task failed"


def _raise_if_task_failed(result: Any) -> None:
    """A worker that says the reference task itself fails: the user's input, not a verdict."""
    if result.crashed and result.returncode == TASK_FAILED_EXIT and TASK_FAILED_TEXT in result.stderr_tail:
        line = next(x for x in result.stderr_tail.splitlines() if TASK_FAILED_TEXT in x)
        raise UserInputError(line.replace("kevin-worker: ", "").strip())


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
    check = getattr(evaluator, "check_environment", None)
    if callable(check):
        check()
    return evaluator
