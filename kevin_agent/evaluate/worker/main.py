"""The GPU worker: one isolated child process evaluates one candidate (``evaluate.protocol``).

``python -m kevin_agent.evaluate.worker``: imports torch, initialises CUDA, prints ``READY``, reads
one job path from stdin, evaluates (load, correctness, provenance, timing, speed of light) and writes a
``WorkerReply`` (the verdict, or why the reference task itself fails) atomically, exit 0.
Other exits (no reply): ``WorkerExit``. torch and the standard library only.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kevin_agent.evaluate.protocol import READY_LINE, BadJob, WorkerExit, WorkerJob, WorkerReply
from kevin_agent.evaluate.worker.baseline import BuiltAhead
from kevin_agent.evaluate.worker.cache_dirs import point_caches
from kevin_agent.evaluate.worker.guards import OWN_MODULES, capture_references, with_module_state
from kevin_agent.evaluate.worker.provenance import warm_profiler
from kevin_agent.evaluate.worker.stages import TaskProblem, baseline_after_build, build_ahead, evaluate_job
from kevin_agent.evaluate.worker.warm import warm_checks

# A worker that built torch.compile ahead waits this long for its task's baseline job (the parent
# hands it over once it holds the GPU's lease, which another process may hold for minutes), then exits.
KEPT_BUILD_WAIT_S = 900.0


def write_reply(job: WorkerJob, reply: WorkerReply) -> None:
    """Write the reply atomically (a temp file in the same folder, then rename), stamped with the
    job's reply token: the parent takes no reply without it (a candidate writing its own is not)."""
    from kevin_agent.atomic import write_text_atomically

    reply.token = job.reply_token
    job.result_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(job.result_path, reply.to_json())


def read_job(path: Path) -> WorkerJob:
    """The job at ``path``, its file removed once read: the reply token it holds must not be left
    where the candidate's code could read it (BadJob with one line)."""
    job = WorkerJob.read(path)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # the reply still needs the token; the candidate could now read it
        print(f"kevin-worker: could not remove the job file: {exc}", file=sys.stderr, flush=True)
    return job


def cache_dir_of(job: WorkerJob) -> Path:
    """The build cache the parent filled (the job's, else the default root)."""
    if job.cache_dir is not None:
        return job.cache_dir
    from kevin_agent.evaluate.build.cache import default_cache_root

    return default_cache_root()


def _exit_with_parent() -> queue.Queue[str]:
    """The parent keeps our stdin open while it waits for us; end of file means it died (or gave
    up on us): exit at once, releasing the GPU, instead of running on unwatched. What it writes
    meanwhile (the baseline job after a build ahead) comes out of the queue, a line each."""
    lines: queue.Queue[str] = queue.Queue()

    def watch() -> None:
        try:
            for line in sys.stdin:
                lines.put(line.strip())
        finally:
            os._exit(WorkerExit.ORPHANED)

    threading.Thread(target=watch, name="kevin-parent-watch", daemon=True).start()
    return lines


def _one_compile_thread() -> None:
    """torch.compile compiles in this process: no pool of compile processes (one per core) started
    in every baseline job, competing with the builds and the timing. Inductor reads the variable
    when its config is first imported (``_warm_imports`` does), so it is set before that, and the
    config itself where it was imported already."""
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.compile_threads = 1  # type: ignore[attr-defined]


def _prepare_caches(cache_dir: Path) -> None:
    """torch.compile's caches next to the build cache (or where the parent said), shared by every
    worker: ``cache_dirs.point_caches``."""
    point_caches(cache_dir)
    _one_compile_thread()


def _warm_imports() -> None:
    """Modules the job needs, imported while the worker is still a spare."""
    import torch._dynamo  # its import wraps torch.manual_seed: do it before capturing
    import torch.profiler  # provenance: captured below, warmed up before READY
    import torch.utils.cpp_extension
    import torch.utils.flop_counter  # noqa: F401


def main() -> int:
    own = OWN_MODULES
    if not torch.cuda.is_available():
        print("kevin-worker: no CUDA device is available to torch", file=sys.stderr, flush=True)
        return WorkerExit.NO_CUDA
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    torch.empty(1, device=device)  # create the context now, while the worker is a spare
    stream = torch.cuda.current_stream(device)
    _one_compile_thread()
    _warm_imports()
    captured = capture_references(own_modules=own)  # before any candidate code runs
    warm_profiler(captured, device)  # CUPTI's one-time setup off the candidate's clock (provenance)
    warm_checks(device)  # the correctness checks' kernels loaded while a spare, not in the lease
    captured = with_module_state(captured, own)  # the warm-up's outcome is part of the judge's state
    print(READY_LINE, flush=True)
    line = sys.stdin.readline().strip()
    try:
        if not line:
            raise BadJob("no job path on stdin")
        job = read_job(Path(line))
    except BadJob as exc:
        print(f"kevin-worker: {exc}", file=sys.stderr, flush=True)
        return WorkerExit.BAD_JOB
    lines = _exit_with_parent()
    cache_dir = cache_dir_of(job)
    _prepare_caches(cache_dir)
    return _run_job(job, cache_dir, (captured, device, stream), lines)


def _task_failure(exc: TaskProblem) -> WorkerReply:
    text = str(exc).strip()
    return WorkerReply(task_failure=text.splitlines()[-1] if text else "unknown error", task_failure_detail=text)


def _answer(job: WorkerJob, make: Callable[[], WorkerReply]) -> int:
    """Write ``make()``'s reply to ``job`` (a TaskProblem: the task's failure) and exit OK; a bug in
    the worker writes none and exits INTERNAL, its traceback on stderr."""
    try:
        reply = make()
    except TaskProblem as exc:
        reply = _task_failure(exc)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return WorkerExit.INTERNAL
    write_reply(job, reply)
    return WorkerExit.OK


def _run_job(job: WorkerJob, cache_dir: Path, gpu: tuple[Any, Any, Any], lines: queue.Queue[str]) -> int:
    """The job's reply written; after a compile-ahead job that built, the task's baseline job too."""
    captured, device, stream = gpu
    if not job.compile_ahead:
        return _answer(job, lambda: evaluate_job(job, cache_dir, captured, device, stream))
    kept: list[BuiltAhead] = []

    def build() -> WorkerReply:
        reply, built = build_ahead(job, captured, device, stream)
        if built is not None and reply.compiled_ahead is not None:
            reply.compiled_ahead.waits_for_baseline = True  # the parent keeps this worker for it
            kept.append(built)
        return reply

    code = _answer(job, build)
    return _baseline_after_build(job, kept[0], gpu, lines) if code == WorkerExit.OK and kept else code


def _baseline_after_build(first: WorkerJob, built: BuiltAhead, gpu: tuple[Any, Any, Any],
                          lines: queue.Queue[str]) -> int:
    """The task's baseline job, the next line on stdin, timed on this worker's build (the parent
    holds the GPU's lease by then); end of file instead ends the worker (the watch exits)."""
    captured, device, stream = gpu
    try:
        try:
            line = lines.get(timeout=KEPT_BUILD_WAIT_S)
        except queue.Empty:
            raise BadJob(f"no baseline job came within {KEPT_BUILD_WAIT_S:g} s of the build ahead") from None
        job = read_job(Path(line))
        if not job.measure_baseline or job.task_source != first.task_source:
            raise BadJob("the job after a build ahead must be its task's baseline job")
    except BadJob as exc:
        print(f"kevin-worker: {exc}", file=sys.stderr, flush=True)
        return WorkerExit.BAD_JOB
    return _answer(job, lambda: baseline_after_build(job, built, captured, device, stream))
