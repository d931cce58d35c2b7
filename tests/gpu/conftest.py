"""GPU test fixtures: every candidate is compiled once (in parallel) into one build cache, then
each job runs in a real isolated worker process through ``isolation.WorkerPool``.

Every GPU test runs under a per-test timeout (pytest-timeout, set-up included): its own
``timeout`` mark, else ``DEFAULT_TIMEOUT_S``. Bounded so that one hang cannot eat a part of
``scripts/gpu_session.sh`` (tests/test_gpu_modules.py checks every mark stays within 400 s).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from gpu_helpers import (
    ADVERSARIAL_NAMES,
    CORRECT,
    adversarial_candidate,
    build_arch,
    correct_candidate,
    log_record,
    loop_variants,
)

DEFAULT_TIMEOUT_S = 240  # the slowest unmarked test (a worker job after a cold precompile) takes ~90 s


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


@pytest.fixture(scope="session")
def device_arch() -> str:
    """The arch every GPU test builds for (``gpu_helpers.build_arch``: what a worker resolves)."""
    return build_arch()


@pytest.fixture(scope="session")
def gpu_cache_dir(tmp_path_factory: pytest.TempPathFactory, device_arch: str) -> Path:
    """A build cache holding every candidate the GPU tests use (compiled in parallel), the loop
    test's compilable turns included: its evaluator shares this cache (and its torch header)."""
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_many

    root = tmp_path_factory.mktemp("kevin-cache")
    cache = BuildCache(root, arch=device_arch)
    names = [f"kernels/{n}" for n in CORRECT] + [f"adversarial/{n}" for n in ADVERSARIAL_NAMES]
    codes = [correct_candidate(n.split("/")[1]) if n.startswith("kernels") else adversarial_candidate(n.split("/")[1])
             for n in names]
    variants = loop_variants()
    names += ["loop/slow", "loop/wrong"]
    codes += [variants["slow"], variants["wrong"]]
    started = time.monotonic()
    outcomes = compile_many(codes, cache)
    builds = {n: [(r.seconds, r.cache_hit, r.path) for r in o.results] for n, o in zip(names, outcomes, strict=True)}
    log_record({"event": "precompile", "seconds": round(time.monotonic() - started, 2), "builds": builds})
    failed = {n: o.message[:2000] for n, o in zip(names, outcomes, strict=True) if not o.ok}
    assert not failed, failed
    return root


@pytest.fixture(scope="session")
def worker_pool():
    from kevin_agent.evaluate.isolation import WorkerPool

    with WorkerPool(run_timeout_s=300.0) as pool:
        yield pool


