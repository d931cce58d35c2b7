"""What the machine offers for evaluation: torch with CUDA, nvcc, a CUDA device, its architecture.

Problems become one-line ``EnvironmentProblem`` errors (exit code 3). Imports torch lazily.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.errors import EnvironmentProblem


@dataclass(frozen=True)
class EnvironmentInfo:
    torch_version: str
    torch_cuda: Optional[str]
    nvcc: Optional[str]
    cuda_home: Optional[str]
    gpu_name: Optional[str]
    capability: Optional[str]  # e.g. "9.0"


FALLBACK_NVCC: tuple[str, ...] = ("/usr/local/cuda/bin/nvcc",)


def find_nvcc() -> Optional[str]:
    """nvcc from CUDA_HOME / CUDA_PATH, then PATH, then /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    return next((path for path in FALLBACK_NVCC if Path(path).is_file()), None)


def cuda_home_of(nvcc: str) -> Optional[str]:
    """The toolkit root of an nvcc (one with include/cuda_runtime.h; wrapper scripts are skipped)."""
    candidates = [Path(nvcc).resolve().parent.parent] + [Path(p).parent.parent for p in FALLBACK_NVCC]
    for home in candidates:
        if (home / "include" / "cuda_runtime.h").is_file():
            return str(home)
    return None


def detect_device() -> tuple[Optional[str], Optional[str]]:
    """(GPU name, compute capability "M.m") of device 0, or (None, None) without a device."""
    import torch

    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            return None, None
        major, minor = torch.cuda.get_device_capability(0)
        return torch.cuda.get_device_name(0), f"{major}.{minor}"
    except Exception:  # a broken driver reads as no device
        return None, None


def inspect_environment() -> EnvironmentInfo:
    """Look without judging; raises only when torch itself is missing."""
    try:
        import torch
    except ImportError as err:
        raise EnvironmentProblem(f"torch is not importable ({err}); install a CUDA build of torch") from None
    nvcc = find_nvcc()
    gpu_name, capability = detect_device()
    return EnvironmentInfo(
        torch_version=str(torch.__version__),
        torch_cuda=torch.version.cuda,
        nvcc=nvcc,
        cuda_home=cuda_home_of(nvcc) if nvcc else None,
        gpu_name=gpu_name,
        capability=capability,
    )


def check_environment(compile_only: bool = False) -> EnvironmentInfo:
    """Raise a one-line EnvironmentProblem unless this machine can evaluate; set CUDA_HOME."""
    info = inspect_environment()
    if not info.torch_cuda:
        raise EnvironmentProblem(
            f"torch {info.torch_version} was built without CUDA; install a CUDA build of torch"
        )
    if not info.nvcc:
        raise EnvironmentProblem(
            "nvcc not found (looked in CUDA_HOME, PATH and /usr/local/cuda); install the CUDA toolkit "
            "or set CUDA_HOME"
        )
    if not os.environ.get("CUDA_HOME") and info.cuda_home:
        os.environ["CUDA_HOME"] = info.cuda_home
    if not compile_only and info.gpu_name is None:
        raise EnvironmentProblem(
            "no CUDA device is visible (torch.cuda.is_available() is False); "
            "use --compile-only to stop after compiling"
        )
    return info


def resolve_arch(requested: Optional[str], info: Optional[EnvironmentInfo] = None) -> str:
    """The TORCH_CUDA_ARCH_LIST to build for: flag, environment, then the device."""
    if requested:
        return requested
    from_env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if from_env:
        return from_env
    capability = info.capability if info else detect_device()[1]
    if capability:
        return capability
    raise EnvironmentProblem(
        "no CUDA device to take the architecture from; pass --arch (e.g. 9.0) or set TORCH_CUDA_ARCH_LIST"
    )
