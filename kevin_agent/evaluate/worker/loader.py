"""Loading task and candidate sources as real modules, and error text the model can act on.

Sources are written to files in the worker's scratch directory and imported from there, so
tracebacks carry real line numbers. ``describe_exception`` keeps only the candidate's own frames
(shown as ``candidate.py``) and the error line; CUDA errors are reduced to the driver's words.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

CANDIDATE_DISPLAY_NAME = "candidate.py"
MAX_ERROR_CHARS = 3000
MAX_FRAMES = 8

# Boilerplate torch appends to CUDA errors: no help to the model.
_CUDA_NOISE = (
    "CUDA kernel errors might be asynchronously reported",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING",
    "Compile with `TORCH_USE_CUDA_DSA`",
    "Device-side assertions were explicitly omitted",
    "Search for `cuda",
)


def load_module_from_file(source: str, path: Path, module_name: str) -> types.ModuleType:
    """Write ``source`` to ``path`` and execute it as module ``module_name`` (registered in sys.modules)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def is_cuda_error(exc: BaseException) -> bool:
    """A CUDA runtime error (illegal address, launch failure, ...) as torch reports it."""
    name = type(exc).__name__
    return name in ("AcceleratorError", "CudaError") or "CUDA error" in str(exc)


def clean_error_line(text: str) -> str:
    """Drop torch's CUDA boilerplate lines and cap the length."""
    kept = [line for line in text.splitlines() if line.strip() and not line.strip().startswith(_CUDA_NOISE)]
    cleaned = "\n".join(kept).strip()
    if len(cleaned) > MAX_ERROR_CHARS:
        cleaned = cleaned[:MAX_ERROR_CHARS] + " ... (truncated)"
    return cleaned


def describe_exception(exc: BaseException, candidate_path: Path | str | None) -> str:
    """The candidate's frames (``File "candidate.py", line N, in f``) and the error line."""
    frames = []
    if candidate_path is not None:
        wanted = os.path.realpath(str(candidate_path))
        for frame in traceback.extract_tb(exc.__traceback__):
            if os.path.realpath(frame.filename) == wanted:
                frames.append(frame)
    lines = []
    if frames:
        lines.append("Traceback (your code's frames):")
        for frame in frames[-MAX_FRAMES:]:
            lines.append(f'  File "{CANDIDATE_DISPLAY_NAME}", line {frame.lineno}, in {frame.name}')
            if frame.line:
                lines.append(f"    {frame.line.strip()}")
    error = "".join(traceback.format_exception_only(type(exc), exc))
    if candidate_path is not None:
        error = error.replace(str(candidate_path), CANDIDATE_DISPLAY_NAME)
    if is_cuda_error(exc) and not frames:
        lines.append("CUDA error raised while running your kernels (reported at the next synchronization):")
    lines.append(clean_error_line(error))
    return "\n".join(lines)


# Frames of torch.compile's compiler (dynamo's frame conversion, AOT autograd, inductor) and of
# Triton's JIT: an exception raised through one of them comes from generated code being built.
_GENERATED_CODE_FRAMES = ("/torch/_inductor/", "/torch/_dynamo/convert_frame.py", "/torch/_dynamo/output_graph.py",
                          "/torch/_dynamo/symbolic_convert.py", "/torch/_functorch/aot_autograd",
                          "/torch/_functorch/_aot_autograd/", "/triton/")
_GENERATED_CODE_ERRORS = ("torch._dynamo.exc", "torch._inductor", "triton")
MAX_CHAINED = 8


def raised_by_generated_code(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it chains to) was raised while torch.compile or Triton was
    building or running generated code: a frame of their compilers, or one of their error types."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAINED:
        seen.add(id(current))
        module = type(current).__module__ or ""
        if module.startswith(_GENERATED_CODE_ERRORS):
            return True
        for frame in traceback.extract_tb(current.__traceback__):
            name = frame.filename.replace(os.sep, "/")
            if any(marker in name for marker in _GENERATED_CODE_FRAMES):
                return True
        current = current.__cause__ or current.__context__
    return False


def install_build_hook(cache_dir: Path, arch: str | None, loaded: list[Any] | None = None) -> Any:
    """Route the candidate's load_inline to the build cache the parent filled.

    ``loaded`` receives the ``BuildResult`` of every extension the candidate loads (provenance: the
    kernels built into them are the candidate's own). Returns the ``BuildCache`` (its toolchain
    resolved: that runs nvcc, impossible once the candidate is confined), or a note (str) when the
    build module is unavailable (stock load_inline is used then, and nothing is recorded).
    """
    try:
        from kevin_agent.evaluate.build.cache import BuildCache
        from kevin_agent.evaluate.build.compile import install_load_inline_hook
    except ImportError as exc:
        return f"build cache unavailable ({exc}); using stock load_inline"
    cache = BuildCache(Path(cache_dir), arch=arch)
    try:
        cache.toolchain  # noqa: B018 - resolved now: `nvcc --version` cannot run once confined
    except Exception as exc:  # no nvcc on this host: the candidate's own load_inline decides
        return f"build cache toolchain unavailable ({exc}); using stock load_inline"
    install_load_inline_hook(cache, loaded.append if loaded is not None else None)
    return cache
