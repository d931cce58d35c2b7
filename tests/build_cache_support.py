"""Where the tests that really compile (nvcc) keep their one shared build cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def shared_build_cache_dir() -> Path:
    """The one build cache of every test that really compiles (nvcc): the precompiled header and
    each fixture's build are paid once per machine, not once per test. Outside pytest's rotating
    basetemp (concurrent sessions prune it); content-addressed and locked, so sharing is safe."""
    return Path(os.environ.get("KEVIN_TEST_BUILD_CACHE") or Path(tempfile.gettempdir()) / "kevin-test-build-cache")
