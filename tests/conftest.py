"""Shared test setup: GPU tests run only where a CUDA device exists; nvcc builds target sm_90."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from build_cache_support import shared_build_cache_dir
from fake_vllm_server import fake_server  # noqa: F401 - a fixture: tests take it by name

# Compiling CUDA without a GPU needs an explicit architecture (torch looks for a device otherwise).
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
_nvcc = shutil.which("nvcc")
if not os.environ.get("CUDA_HOME") and _nvcc:
    _home = os.path.dirname(os.path.dirname(os.path.realpath(_nvcc)))
    # /usr/local/bin/nvcc may be a wrapper script: only a directory with the headers is a toolkit
    if not os.path.isfile(os.path.join(_home, "include", "cuda_runtime.h")) and os.path.isdir("/usr/local/cuda"):
        _home = "/usr/local/cuda"
    os.environ["CUDA_HOME"] = _home


# A cold build (precompiled header, torch headers) takes ~100 s on a 2-core machine and several times
# that on a busy one: the product's 300 s build limit would stop it. Tests guard against hangs with
# pytest-timeout instead (children inherit this; a test of the limit itself passes its own).
os.environ.setdefault("KEVIN_COMPILE_TIMEOUT_S", "1500")

# The tests' one shared build cache outlives each run and holds the precompiled headers of every
# checkout and venv on the machine (each ~0.7 GB): the product's 5 GB cap would evict builds in the
# middle of a run, rebuild them, and print a line that tests of a command's exact output don't expect.
# Tests of the cap pass their own (explicit arguments or environment).
os.environ.setdefault("KEVIN_CACHE_MAX_GB", "200")


@pytest.fixture(scope="session")
def shared_build_cache() -> Path:
    return shared_build_cache_dir()


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) tests that cannot apply here, so no skip is counted as a pass:
    ``gpu`` tests where there is no GPU, ``nogpu`` tests (about behaviour without one) where there is."""
    unwanted = "nogpu" if _has_cuda() else "gpu"
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if item.get_closest_marker(unwanted) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
