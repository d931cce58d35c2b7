"""Helpers of the GPU tests: fixture sources, the job runner, the optional JSON-lines log.

``KEVIN_GPU_LOG`` (optional): a file receiving every verdict and build time, so a GPU run leaves
its numbers behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "tests" / "fixtures" / "kernels"
ADVERSARIAL = REPO / "tests" / "fixtures" / "adversarial"
CORRECT = ("add", "gelu", "matmul", "softmax")
ADVERSARIAL_NAMES = (
    "uninitialised_output", "mutates_input", "side_stream", "constant_output", "patched_timing",
    "illegal_access", "hang", "exits",
)


def task_source(name: str) -> str:
    path = KERNELS / f"{name}_task.py"
    return (path if path.exists() else ADVERSARIAL / f"{name}_task.py").read_text()


def correct_candidate(name: str) -> str:
    return (KERNELS / f"{name}_candidate.py").read_text()


def adversarial_candidate(name: str) -> str:
    return (ADVERSARIAL / f"{name}.py").read_text()


def log_record(record: dict[str, Any]) -> None:
    path = os.environ.get("KEVIN_GPU_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def run_job(pool: Any, cache_dir: Path, task: str, candidate: str, label: str, **settings: Any) -> Any:
    """One job in a fresh worker; returns isolation.WorkerResult (verdict, returncode, stderr)."""
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.protocol import WorkerJob

    job = WorkerJob(task, candidate, Path("unset"), EvalSettings(**settings), cache_dir=Path(cache_dir))
    result = pool.run(job)
    log_record({"event": "verdict", "label": label, "seconds": round(result.seconds, 2),
                "returncode": result.returncode, "crashed": result.crashed,
                "verdict": result.verdict.to_dict(), "stderr_tail": result.stderr_tail[-1500:]})
    return result
