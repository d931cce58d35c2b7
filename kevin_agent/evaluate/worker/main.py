"""The GPU worker: one isolated child process evaluates one candidate (INTERFACES.md "GPU worker").

``python -m kevin_agent.evaluate.worker``: imports torch, initialises CUDA, prints ``READY``, reads
one job path from stdin, evaluates (load, correctness, timing, speed of light), writes
``{"verdict": Verdict.to_dict()}`` to the job's ``result_path`` atomically and exits 0.

Other exits (no result file): 3 no CUDA device (before READY, one line on stderr); 2 unreadable job;
4 the reference task itself fails (one line on stderr); 1 an internal error (traceback on stderr).
torch and the standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.worker.stages import Job, TaskProblem, evaluate_job
from kevin_agent.evaluate.worker.guards import OWN_MODULES, capture_references

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_JOB, EXIT_NO_CUDA, EXIT_TASK = 0, 1, 2, 3, 4
READY = "READY"


class BadJob(Exception):
    """The job file is missing or malformed."""


def settings_from_dict(raw: dict[str, Any]) -> EvalSettings:
    """EvalSettings from the job's JSON (unknown keys ignored, cache_dir back to a Path)."""
    names = {f.name for f in dataclasses.fields(EvalSettings)}
    values = {k: v for k, v in raw.items() if k in names}
    if values.get("cache_dir") is not None:
        values["cache_dir"] = Path(values["cache_dir"])
    return EvalSettings(**values)


def read_job(path: Path) -> Job:
    """Parse a job file; raises BadJob with one line."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadJob(f"cannot read job {path}: {exc}") from exc
    missing = [k for k in ("task_source", "candidate_source", "result_path") if not isinstance(raw.get(k), str)]
    if missing:
        raise BadJob(f"job {path} lacks {', '.join(missing)}")
    try:
        settings = settings_from_dict(raw.get("settings") or {})
    except TypeError as exc:
        raise BadJob(f"job {path} has bad settings: {exc}") from exc
    cache_dir = raw.get("cache_dir") or (str(settings.cache_dir) if settings.cache_dir else None)
    if not cache_dir:
        from kevin_agent.evaluate.build.cache import default_cache_root

        cache_dir = str(default_cache_root())
    scratch = raw.get("scratch_dir")
    return Job(raw["task_source"], raw["candidate_source"], settings, Path(cache_dir),
               Path(raw["result_path"]), Path(scratch) if scratch else None)


def write_result(path: Path, verdict_dict: dict[str, Any]) -> None:
    """Write ``{"verdict": ...}`` atomically: a temp file in the same folder, then rename."""
    from kevin_agent.atomic import write_text_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps({"verdict": verdict_dict}))


def _prepare_caches(cache_dir: Path) -> None:
    """torch.compile's caches next to the build cache, shared by every worker."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache_dir / "triton"))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool left competing with timing


def _warm_imports() -> None:
    """Modules the job needs, imported while the worker is still a spare."""
    import torch._dynamo  # noqa: F401  (its import wraps torch.manual_seed: do it before capturing)
    import torch.utils.cpp_extension  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401


def main() -> int:
    own = OWN_MODULES
    if not torch.cuda.is_available():
        print("kevin-worker: no CUDA device is available to torch", file=sys.stderr, flush=True)
        return EXIT_NO_CUDA
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    torch.empty(1, device=device)  # create the context now, while the worker is a spare
    stream = torch.cuda.current_stream(device)
    _warm_imports()
    captured = capture_references(own_modules=own)  # before any candidate code runs
    print(READY, flush=True)
    line = sys.stdin.readline().strip()
    try:
        if not line:
            raise BadJob("no job path on stdin")
        job = read_job(Path(line))
    except BadJob as exc:
        print(f"kevin-worker: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_JOB
    _prepare_caches(job.cache_dir)
    try:
        verdict = evaluate_job(job, captured, device, stream)
    except TaskProblem as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unknown error"
        print(f"kevin-worker: the reference task failed: {first}", file=sys.stderr)
        print(str(exc), file=sys.stderr, flush=True)
        return EXIT_TASK
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL
    write_result(job.result_path, verdict.to_dict())
    return EXIT_OK

