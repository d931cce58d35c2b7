"""Where a GPU job's second goes (issue 20): put this folder on PYTHONPATH with
``KEVIN_WORKER_PROFILE=DIR`` set, and run a bench. Not imported by kevin itself.

- In a worker (``-m kevin_agent.evaluate.worker``): ``_run_job`` runs under cProfile (unless
  ``KEVIN_WORKER_PROFILE_MARKS_ONLY=1``); its stats and wall marks (``time.time()``) are written
  into the worker's own folder (the only place it may write once confined) as ``kevin.prof`` and
  ``kevin-marks.json``.
- In the evaluating process: hand-over, process exit seen and result collected are marked; the
  worker's files are copied to ``DIR`` before its folder is removed; ``DIR/parent.jsonl`` gets a
  line per job. ``bench/worker_profile/report.py DIR`` sums it up.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

OUT = os.environ.get("KEVIN_WORKER_PROFILE")
_WORKER = "kevin_agent.evaluate.worker.main"
_POOL = "kevin_agent.evaluate.isolation"


def _patch_worker(module: Any) -> None:
    run_job = module._run_job

    def profiled(job: Any, cache_dir: Any, gpu: Any, lines: Any) -> int:
        import cProfile

        marks: dict[str, Any] = {"run_job_start": time.time(), "compile_ahead": bool(job.compile_ahead),
                                 "baseline": bool(job.measure_baseline)}
        folder = Path(job.result_path).parent
        profile = None if os.environ.get("KEVIN_WORKER_PROFILE_MARKS_ONLY") else cProfile.Profile()
        if profile is not None:
            profile.enable()
        try:
            return run_job(job, cache_dir, gpu, lines)
        finally:
            if profile is not None:
                profile.disable()
            marks["run_job_end"] = time.time()
            try:
                if profile is not None:
                    profile.dump_stats(str(folder / "kevin.prof"))
                (folder / "kevin-marks.json").write_text(json.dumps(marks))
            except OSError as exc:
                print(f"worker_profile: {exc}", file=sys.stderr)

    module._run_job = profiled


def _patch_pool(module: Any) -> None:
    pool = module.WorkerPool
    hand_over, collect, discard, spawn = pool._hand_over, pool._collect, pool._discard, pool._spawn
    records: dict[int, dict[str, Any]] = {}

    def _spawn(self: Any) -> Any:
        """The worker's scrubbed environment gets this folder's variables (and so the profiling)."""
        self.extra_env.update({name: value for name, value in os.environ.items()
                               if name.startswith("KEVIN_WORKER_PROFILE")})
        return spawn(self)

    def _hand_over(self: Any, worker: Any, job: Any) -> Any:
        handed = hand_over(self, worker, job)
        records[id(worker)] = {"handed": time.time(), "pid": worker.pid, "compile_ahead": bool(job.compile_ahead),
                               "baseline": bool(job.measure_baseline), "startup_s": worker.startup_s}
        return handed

    def _collect(self: Any, worker: Any, job: Any, *args: Any, **kwargs: Any) -> Any:
        record = records.get(id(worker), {})
        record["exit_seen"] = time.time()
        result_path = Path(job.result_path)
        if result_path.exists():
            record["reply_mtime"] = result_path.stat().st_mtime
        result = collect(self, worker, job, *args, **kwargs)
        record["collected"] = time.time()
        stages = getattr(getattr(getattr(result.verdict, "details", None), "environment", None), "stage_seconds", {})
        record["stage_seconds"] = dict(stages or {})
        record["seconds"] = result.seconds
        return result

    def _discard(self: Any, worker: Any) -> None:
        discard(self, worker)  # kills first, so the files are final (the folder is removed after)

    def _discard_copying(self: Any, worker: Any) -> None:
        record = records.pop(id(worker), None)
        for proc in (worker.proc, worker.judge):
            if proc is not None:
                module.kill_group(proc)
        if record is not None and OUT:
            name = f"{os.getpid()}-{worker.pid}"
            for file in ("kevin.prof", "kevin-marks.json"):
                if (worker.scratch / file).exists():
                    shutil.copy(worker.scratch / file, Path(OUT) / f"{name}-{file}")
            marks = worker.scratch / "kevin-marks.json"
            if marks.exists():
                record["worker"] = json.loads(marks.read_text())
            with open(Path(OUT) / "parent.jsonl", "a") as out:
                out.write(json.dumps(record) + "\n")
        _discard(self, worker)

    pool._hand_over, pool._collect, pool._discard, pool._spawn = _hand_over, _collect, _discard_copying, _spawn


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patch a module right after it is first imported."""

    def __init__(self, patches: dict[str, Any]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader: Any = spec.loader
        patch = self.patches.pop(name)
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch
        return spec


if OUT:
    _argv = getattr(sys, "orig_argv", [])
    if "kevin_agent.evaluate.worker" in _argv:
        sys.meta_path.insert(0, _AfterImport({_WORKER: _patch_worker}))
    elif "kevin_agent.evaluate.judge" not in _argv and "kevin_agent.evaluate.sandbox.launch" not in _argv:
        Path(OUT).mkdir(parents=True, exist_ok=True)
        sys.meta_path.insert(0, _AfterImport({_POOL: _patch_pool}))
