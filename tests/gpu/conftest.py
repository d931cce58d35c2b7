"""GPU test fixtures: every candidate is compiled once (in parallel) into one build cache, then
each job runs in a real isolated worker process through ``isolation.WorkerPool``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from gpu_helpers import ADVERSARIAL_NAMES, CORRECT, adversarial_candidate, correct_candidate, log_record


@pytest.fixture(scope="session")
def device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


@pytest.fixture(scope="session")
def gpu_cache_dir(tmp_path_factory: pytest.TempPathFactory, device_arch: str) -> Path:
    """A build cache holding every candidate the GPU tests use (compiled in parallel)."""
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    root = tmp_path_factory.mktemp("kevin-cache")
    cache = BuildCache(root, arch=device_arch)
    names = [f"kernels/{n}" for n in CORRECT] + [f"adversarial/{n}" for n in ADVERSARIAL_NAMES]
    codes = [correct_candidate(n.split("/")[1]) if n.startswith("kernels") else adversarial_candidate(n.split("/")[1])
             for n in names]
    started = time.monotonic()
    outcomes = compile_many(codes, cache)
    log_record({"event": "precompile", "seconds": round(time.monotonic() - started, 2),
                "builds": {n: [(r.seconds, r.cache_hit, r.path) for r in o.results] for n, o in zip(names, outcomes)}})
    failed = {n: o.message[:2000] for n, o in zip(names, outcomes) if not o.ok}
    assert not failed, failed
    return root


@pytest.fixture(scope="session")
def worker_pool():
    from kevin_agent.evaluate.isolation import WorkerPool

    with WorkerPool(run_timeout_s=300.0) as pool:
        yield pool


