"""Helpers of the GPU tests: fixture sources, the job runner, the optional JSON-lines log.

``KEVIN_GPU_LOG`` (optional): a file receiving every verdict and build time, so a GPU run leaves
its numbers behind.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kevin_agent.evaluate.isolation import WorkerResult

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "tests" / "fixtures" / "kernels"
ADVERSARIAL = REPO / "tests" / "fixtures" / "adversarial"
CORRECT = ("add", "gelu", "matmul", "softmax")
ADVERSARIAL_NAMES = (
    "uninitialised_output", "mutates_input", "side_stream", "constant_output", "patched_timing",
    "illegal_access", "hang", "exits",
)


# The loop test's scripted turns (tests/gpu/test_loop_gpu.py), built from the fused-GELU fixture.
GELU_LAUNCH = "gelu_kernel<<<(unsigned int)blocks, threads>>>"


def loop_variants() -> dict[str, str]:
    """fast (the fixture), slow (one block of 32 threads walks the whole 16M-element tensor:
    correct, far slower than eager), broken (a missing semicolon: nvcc rejects it) and wrong
    (drops GELU's 0.5 factor: runs, wrong values)."""
    fast = correct_candidate("gelu")
    assert GELU_LAUNCH in fast
    return {
        "fast": fast,
        "slow": fast.replace(GELU_LAUNCH, "gelu_kernel<<<1, 32>>>"),
        "broken": fast.replace("y[idx] = gelu_tanh(x[idx]);", "y[idx] = gelu_tanh(x[idx])"),
        "wrong": fast.replace("return 0.5f * x * (1.0f + tanhf(inner));", "return x * (1.0f + tanhf(inner));"),
    }


@functools.lru_cache(maxsize=1)
def build_arch() -> str:
    """The arch list the GPU tests build for and hand every job: the build's own resolution
    (TORCH_CUDA_ARCH_LIST, else the device), as a worker with no arch resolves it. A cache built
    for "9.0" is no hit for a worker that resolves "9.0a" from the environment: the worker then
    tries to build under the sandbox and its load fails (seen on the H200 host)."""
    from kevin_agent.evaluate.build.flags import resolve_arch

    return resolve_arch(None)


def persistent_cache_root() -> Path:
    """The build cache kept between pytest runs on one machine (``KEVIN_GPU_TEST_CACHE``, default
    ``$TMPDIR/kevin-gpu-provenance-cache``): test_gpu_provenance.py's ``prov_cache`` root, which
    the attack module shares (the torch header is built once for both)."""
    import tempfile

    return Path(os.environ.get("KEVIN_GPU_TEST_CACHE") or Path(tempfile.gettempdir()) / "kevin-gpu-provenance-cache")


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


def run_job(pool: Any, cache_dir: Path, task: str, candidate: str, label: str, **settings: Any) -> WorkerResult:
    """One job in a fresh worker: its WorkerResult (verdict, returncode, stderr)."""
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.protocol import WorkerJob

    job = WorkerJob(task, candidate, Path("unset"), EvalSettings(**{"arch": build_arch(), **settings}),
                    cache_dir=Path(cache_dir))
    result = pool.run(job)
    log_record({"event": "verdict", "label": label, "seconds": round(result.seconds, 2),
                "returncode": result.returncode, "crashed": result.crashed,
                "verdict": result.verdict.to_dict(), "stderr_tail": result.stderr_tail[-1500:]})
    return result
