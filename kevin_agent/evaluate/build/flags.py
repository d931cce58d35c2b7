"""Toolchain discovery and compiler/linker flags, from torch's public helpers only.

Works across torch 2.4 ... 2.14 (``include_paths(cuda=True)`` in old versions,
``include_paths(device_type="cuda")`` in new ones; C++17 before the headers demanded C++20).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from kevin_agent.errors import EnvironmentProblem

RECIPE_VERSION = "kevin-build-9"  # bump when generated files or flags change meaning
NO_ARCH = ("no CUDA device to target: to compile without one, name the architecture with `--arch 9.0` "
           "(kevin eval) or TORCH_CUDA_ARCH_LIST=9.0")


DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


def _is_toolkit(home: Path) -> bool:
    return (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file()


def find_cuda_home() -> Path:
    """CUDA_HOME, else the toolkit of ``which nvcc`` (resolved), else /usr/local/cuda.

    A directory counts only with bin/nvcc and include/cuda_runtime.h (a wrapper script such as
    /usr/local/bin/nvcc does not make /usr/local a toolkit).
    """
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        if not _is_toolkit(Path(env)):
            raise EnvironmentProblem(
                f"CUDA_HOME={env} is not a CUDA toolkit (needs bin/nvcc and include/cuda_runtime.h)"
            )
        return Path(env)
    found = shutil.which("nvcc")
    if found and _is_toolkit(Path(os.path.realpath(found)).parent.parent):
        return Path(os.path.realpath(found)).parent.parent
    if _is_toolkit(DEFAULT_CUDA_HOME):
        return DEFAULT_CUDA_HOME
    raise EnvironmentProblem("nvcc not found: install the CUDA toolkit or set CUDA_HOME")


@functools.cache
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvironmentProblem(f"nvcc at {nvcc} does not run: {exc}") from exc
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1:][0] if out.strip() else "unknown"


def resolve_arch(arch: str | None) -> str:
    """The arch list: argument, else TORCH_CUDA_ARCH_LIST, else the current device's capability."""
    chosen = arch or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if chosen:
        return normalise_arch(chosen)
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    except Exception:  # a broken driver reads as "no device"
        pass
    raise EnvironmentProblem(NO_ARCH)


def normalise_arch(arch: str) -> str:
    items = [a for a in re.split(r"[;,\s]+", arch.strip()) if a]
    for item in items:
        if not re.fullmatch(r"\d+\.\d+[af]?(\+PTX)?", item):
            raise EnvironmentProblem(f"unreadable CUDA arch '{item}' in '{arch}' (expected e.g. 9.0 or 8.6+PTX)")
    return ";".join(items)


def gencode_flags(arch: str) -> list[str]:
    flags = []
    for item in arch.split(";"):
        ptx = item.endswith("+PTX")
        num = item.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def _torch_paths(helper_name: str) -> list[str]:
    from torch.utils import cpp_extension

    helper = getattr(cpp_extension, helper_name)
    try:
        return list(helper(device_type="cuda"))
    except TypeError:  # torch < 2.6 spells it cuda=True
        return list(helper(cuda=True))


@functools.cache
def cxx_standard() -> str:
    """C++20 where torch's headers demand it, else C++17."""
    import torch

    aten = Path(torch.__file__).parent / "include" / "ATen" / "ATen.h"
    try:
        return "c++20" if "C++20 or later" in aten.read_text(errors="replace") else "c++17"
    except OSError:
        return "c++17"


@dataclass(frozen=True)
class Toolchain:
    """Everything about the machine and torch that a build depends on."""

    cuda_home: str
    nvcc: str
    cxx: str
    arch: str
    torch_version: str
    cuda_version: str
    nvcc_version: str
    std: str
    abi: int
    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]
    nvcc_common: tuple[str, ...]

    def fingerprint(self) -> dict[str, str]:
        return {
            "recipe": RECIPE_VERSION, "torch": self.torch_version, "cuda": self.cuda_version,
            "nvcc": self.nvcc_version, "arch": self.arch, "std": self.std, "abi": str(self.abi),
            "cxx": self.cxx, "python": sys.version.split()[0], "includes": ";".join(self.include_dirs),
        }

    def defines(self) -> list[str]:
        return ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={self.abi}"]

    def includes(self, extra: tuple[str, ...] = ()) -> list[str]:
        flags = [f"-I{p}" for p in extra]  # relative to the build folder (source.flags refuses others)
        for path in self.include_dirs:
            flags += ["-isystem", path]
        return flags

    def cxx_flags(self, extra: tuple[str, ...] = ()) -> list[str]:
        """g++ flags for torch-using C++ (the PCH is built with exactly these)."""
        return self.defines() + ["-fPIC", f"-std={self.std}"] + [f.strip() for f in extra if f.strip()]

    def nvcc_flags(self, extra: tuple[str, ...] = (), with_torch: bool = True) -> list[str]:
        flags = (self.defines() if with_torch else []) + list(self.nvcc_common) + gencode_flags(self.arch)
        flags += ["--compiler-options", "-fPIC", f"-std={self.std}"] + [f.strip() for f in extra if f.strip()]
        return flags

    def ldflags(self, extra: tuple[str, ...] = ()) -> list[str]:
        dirs = [f"-L{d}" for d in self.library_dirs]
        rpath = [f"-Wl,-rpath,{d}" for d in self.library_dirs]
        libs = ["-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch", "-ltorch_python", "-lcudart"]
        return ["-shared"] + dirs + rpath + libs + [f.strip() for f in extra if f.strip()]


# The host flags a shared precompiled header may be built with: GCC uses a PCH only under the same
# optimisation level, fast-math setting and macros the header reads, so these few variants exist,
# each spelled here.
PCH_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Ofast", "-Og")


def pch_flags(extra_cflags: tuple[str, ...]) -> tuple[str, ...]:
    """The variant of the shared header a host compile with ``extra_cflags`` can use: kevin-agent's
    own spelling of its optimisation level and fast math, never the candidate's strings (a
    candidate's other flags, e.g. ``-D``, make GCC parse the header itself instead; still correct)."""
    tokens = [t for flag in extra_cflags for t in flag.split()]
    levels = [t for t in tokens if t.startswith("-O")]
    level = {"-O": "-O1", "-Oz": "-Os"}.get(levels[-1], levels[-1]) if levels else ""
    chosen = [next((o for o in PCH_OPT_LEVELS if o == level), "")]
    fast = [t for t in tokens if t in ("-ffast-math", "-fno-fast-math")]
    if fast and fast[-1] == "-ffast-math":
        chosen.append("-ffast-math")
    if "-DNDEBUG" in tokens:  # the torch headers read it (assert), so it is a variant of its own
        chosen.append("-DNDEBUG")
    return tuple(c for c in chosen if c)


# headers of CUDA's libraries that torch's ATen/cuda headers include (<ATen/cuda/CUDAContext.h>: cusparse.h,
# cublas_v2.h); a toolkit of nvcc alone lacks them, and pip's nvidia-* packages ship them
LIBRARY_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h", "curand.h", "cufft.h")


def library_header_dirs(cuda_include: Path) -> list[str]:
    """The ``include`` folders of the installed ``nvidia`` pip packages that hold a library header
    the toolkit lacks, in name order: searched after the toolkit's own, so its headers win."""
    import importlib.util

    missing = [name for name in LIBRARY_HEADERS if not (cuda_include / name).is_file()]
    spec = importlib.util.find_spec("nvidia") if missing else None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    found: list[str] = []
    for root in roots:
        for include in sorted(Path(root).glob("*/include")):
            if any((include / name).is_file() for name in missing) and str(include) not in found:
                found.append(str(include))
    return found


@functools.cache
def _toolchain_cached(arch: str, cuda_home: str) -> Toolchain:
    import torch
    from torch.utils import cpp_extension

    nvcc = str(Path(cuda_home) / "bin" / "nvcc")
    includes = _torch_paths("include_paths")
    python_include = sysconfig.get_path("include", scheme="posix_prefix")
    if python_include:
        includes.append(python_include)
    cuda_include = str(Path(cuda_home) / "include")
    if cuda_include not in includes:
        includes.append(cuda_include)
    includes += [path for path in library_header_dirs(Path(cuda_include)) if path not in includes]
    libs = _torch_paths("library_paths")
    cuda_lib = next((str(p) for p in (Path(cuda_home) / "lib64", Path(cuda_home) / "lib") if p.is_dir()), None)
    if cuda_lib and cuda_lib not in libs:
        libs.append(cuda_lib)
    return Toolchain(
        cuda_home=cuda_home, nvcc=nvcc, cxx=os.environ.get("CXX") or shutil.which("c++") or "g++", arch=arch,
        torch_version=torch.__version__, cuda_version=str(torch.version.cuda), nvcc_version=nvcc_version(nvcc),
        std=cxx_standard(), abi=int(bool(torch._C._GLIBCXX_USE_CXX11_ABI)), include_dirs=tuple(includes),
        library_dirs=tuple(libs), nvcc_common=tuple(cpp_extension.COMMON_NVCC_FLAGS),
    )


def toolchain(arch: str | None = None) -> Toolchain:
    """The toolchain for this machine; EnvironmentProblem (one line) when something is missing."""
    cuda_home = find_cuda_home()
    if shutil.which("ninja") is None and not _ninja_from_package():
        raise EnvironmentProblem("ninja not found: pip install ninja")
    return _toolchain_cached(resolve_arch(arch), str(cuda_home))


def _ninja_from_package() -> str | None:
    try:
        import ninja

        path = Path(ninja.BIN_DIR) / "ninja"
        return str(path) if path.is_file() else None
    except Exception:
        return None


def ninja_binary() -> str:
    return shutil.which("ninja") or _ninja_from_package() or "ninja"
