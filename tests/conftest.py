"""Shared test setup: GPU tests run only where a CUDA device exists; nvcc builds target sm_90."""

from __future__ import annotations

import os
import shutil

import pytest

# Compiling CUDA without a GPU needs an explicit architecture (torch looks for a device otherwise).
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
if not os.environ.get("CUDA_HOME") and shutil.which("nvcc"):
    os.environ["CUDA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("nvcc"))))


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) GPU tests where there is no GPU, so no skip is counted as a pass."""
    if _has_cuda():
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("gpu") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
