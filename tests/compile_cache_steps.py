"""One step of the compile-ahead path in a fresh process, as each worker is one (issue 20):

    python tests/compile_cache_steps.py ahead|measure|kept SCRATCH TASK_FILE DEVICE

``ahead`` runs the worker's compile-ahead job on the task's reference, ``measure`` the baseline
job's torch.compile of it (``baseline._time_compiled``), ``kept`` both in one process (the worker
that kept its build times it); all with the caches of
$TORCHINDUCTOR_CACHE_DIR. Prints one JSON line: the step's outcome, how often the reference ran
eagerly, and what torch.compile's caches logged: each cache key's components (AOT autograd's and
Inductor's FX graph key, one line per component) and every warning, so two steps whose keys differ
show which component did. Used by tests/test_compile_ahead.py (CPU) and the GPU worker test.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

CACHE_LOGGERS = ("torch._inductor.codecache", "torch._functorch._aot_autograd.autograd_cache")


class CacheLog(logging.Handler):
    """Keeps the caches' key details ("... hash details for key K: <lines>") and their warnings."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.keys: list[list[str]] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "hash details for key" in text:
            self.keys.append(text.splitlines())
        elif record.levelno >= logging.WARNING:
            self.warnings.append(text.splitlines()[0][:300] if text else "")


def listen() -> CacheLog:
    import torch._dynamo  # noqa: F401 - torch's logging set up first, as in a worker

    handler = CacheLog()
    for name in CACHE_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    return handler


def main(step: str, scratch: Path, task_file: Path, device: str) -> dict[str, Any]:
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.worker import baseline as job
    from kevin_agent.evaluate.worker import guards
    from kevin_agent.evaluate.worker.context import Context, load_reference
    from kevin_agent.evaluate.worker.main import _one_compile_thread
    from kevin_agent.evaluate.worker.timing import Timer, wall_clock

    class NoPoison(Context):
        def poison(self) -> int:
            return 0

    _one_compile_thread()
    log = listen()
    settings = EvalSettings(sandbox="off", timing_trials=5, warmup_trials=1)
    ctx = NoPoison(guards.capture_references(own_modules=()), wall_clock(), device, settings, VerdictDetails(),
                   scratch / "candidate.py", flush=lambda: None)
    if step in ("ahead", "kept") and device != "cpu":
        import torch

        job.limit_ahead_memory(torch.device(device, torch.cuda.current_device()))  # the cap wants an index
    task, reference, _ = load_reference(task_file.read_text(), scratch, ctx)
    calls: list[int] = []
    forward = reference.forward

    def counted(*args: Any) -> Any:  # counts eager runs of the reference
        calls.append(1)
        return forward(*args)

    reference.forward = counted
    out: dict[str, Any]
    if step == "ahead":
        done, _ = job.compile_ahead(ctx, task, reference)
        out = {"ok": done.ok, "error": done.error, "parts": done.stage_seconds}
    elif step == "kept":  # one worker: the build ahead, then the baseline job on that build
        done, built = job.compile_ahead(ctx, task, reference)
        ran_ahead = len(calls)
        stats, seconds, hit = job._time_compiled(ctx, Timer(ctx.clock, ctx.flush), reference,
                                                 ctx.timing_inputs(task), built)
        out = {"ok": done.ok, "built": built is not None, "ran_ahead": ran_ahead, "timed": stats is not None,
               "seconds": seconds, "hit": hit, "build_s": built.seconds if built else None}
    else:
        stats, seconds, hit = job._time_compiled(ctx, Timer(ctx.clock, ctx.flush), reference,
                                                 ctx.timing_inputs(task))
        out = {"timed": stats is not None, "seconds": seconds, "hit": hit}
    return {**out, "ran": len(calls), "keys": log.keys, "warnings": log.warnings}


def differing_components(first: list[list[str]], second: list[list[str]]) -> list[str]:
    """For each kind of key both steps logged (AOT autograd's, Inductor's FX graph: a step that hit
    one cache computes no key below it), the component lines of one step's first key of that kind
    that the other's lacks, in both directions; [] when they are the same."""
    def by_kind(keys: list[list[str]]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for key in keys:
            found.setdefault(key[0].split(" for key ")[0], set(key[1:]))
        return found

    one, two = by_kind(first), by_kind(second)
    return sorted(line for kind in one.keys() & two.keys() for line in one[kind] ^ two[kind])


def key_hashes(keys: list[list[str]]) -> list[str]:
    """Each logged key as ``KIND: HASH`` (what the two steps looked up)."""
    return [key[0].replace(" hash details for key", ":").rstrip(":") for key in keys]


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])))
