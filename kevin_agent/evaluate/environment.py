"""What the machine offers for evaluation: torch with CUDA, nvcc, a CUDA device, its architecture.

Problems become one-line ``EnvironmentProblem`` errors (exit code 3). Imports torch lazily.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.errors import EnvironmentProblem

# the architecture `kevin eval --compile-only` builds for without a GPU, --arch or TORCH_CUDA_ARCH_LIST
COMPILE_ONLY_ARCH = "9.0"  # H100 / H200, the GPUs Kevin targets
NO_DEVICE = (
    "no CUDA device is visible (torch.cuda.is_available() is False), and kernels are judged on an "
    "NVIDIA GPU; without one, `kevin eval FILE.py::Class CANDIDATE.py --compile-only` compiles a "
    f"candidate (for architecture {COMPILE_ONLY_ARCH}; --arch picks another), `--cluster "
    "ray://HEAD:10001` judges on a Ray cluster's GPUs, and `--evaluator replay:FILE` replays recorded "
    "verdicts (README: Try it without a GPU)"
)


@dataclass(frozen=True)
class EnvironmentInfo:
    torch_version: str
    torch_cuda: Optional[str]
    nvcc: Optional[str]
    cuda_home: Optional[str]
    gpu_name: Optional[str]
    capability: Optional[str]  # e.g. "9.0"


def find_cuda_toolkit() -> Optional[Path]:
    """The CUDA toolkit the builds will use (build_flags.find_cuda_home), or None without one."""
    from kevin_agent.evaluate.build.flags import find_cuda_home

    try:
        return find_cuda_home()
    except EnvironmentProblem:
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
    cuda_home = find_cuda_toolkit()
    gpu_name, capability = detect_device()
    return EnvironmentInfo(
        torch_version=str(torch.__version__),
        torch_cuda=torch.version.cuda,
        nvcc=str(cuda_home / "bin" / "nvcc") if cuda_home else None,
        cuda_home=str(cuda_home) if cuda_home else None,
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
        from kevin_agent.evaluate.build.flags import find_cuda_home

        find_cuda_home()  # raises the one-line reason (no nvcc, or a CUDA_HOME that is no toolkit)
    if not os.environ.get("CUDA_HOME") and info.cuda_home:
        os.environ["CUDA_HOME"] = info.cuda_home
    if not compile_only and info.gpu_name is None:
        raise EnvironmentProblem(NO_DEVICE)
    return info


def resolve_arch(requested: Optional[str], info: Optional[EnvironmentInfo] = None) -> str:
    """The TORCH_CUDA_ARCH_LIST to build for: flag, environment, then the device (as the builds do)."""
    from kevin_agent.evaluate.build.flags import normalise_arch
    from kevin_agent.evaluate.build.flags import resolve_arch as build_arch

    if not requested and not os.environ.get("TORCH_CUDA_ARCH_LIST") and info and info.capability:
        return normalise_arch(info.capability)
    return build_arch(requested)
