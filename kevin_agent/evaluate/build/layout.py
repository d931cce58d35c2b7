"""The files of one extension build: the split (fast) layout and load_inline's whole layout."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kevin_agent.evaluate.build.chunks import SplitRefused, raw_chunks
from kevin_agent.evaluate.build.flags import Toolchain
from kevin_agent.evaluate.build.ninja_file import Step
from kevin_agent.evaluate.build.split import SOURCE_NAME, split_cuda_source
from kevin_agent.evaluate.source.calls import ExtensionSpec

CPP_NAME = "cpp_sources"
BINDINGS_NAME = "kevin_bindings"


@dataclass
class Layout:
    path: str  # "split" or "whole"
    files: dict[str, str]  # file name -> content
    steps: list[Step]
    note: str = ""  # why the split was refused, when it was


def bindings(functions: tuple[str, ...]) -> str:
    """pybind11 bindings for ``functions``, as load_inline generates them."""
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    return f'#line 1 "{BINDINGS_NAME}"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n'


def _main_cpp(spec: ExtensionSpec, module: str, host_part: str = "") -> str:
    cpp = "\n".join(spec.cpp_sources)
    return (
        f"#include <torch/extension.h>\n#undef TORCH_EXTENSION_NAME\n#define TORCH_EXTENSION_NAME {module}\n"
        f"{host_part}#line 1 \"{CPP_NAME}\"\n{cpp}\n" + (bindings(spec.functions) if spec.functions else "")
    )


def cpp_is_declarations_only(cpp_sources: tuple[str, ...]) -> bool:
    """cpp_sources holding only includes and function prototypes can share the host TU."""
    try:
        chunks = raw_chunks("\n".join(cpp_sources))
    except SplitRefused:
        return False
    for chunk in chunks:
        if chunk.preprocessor:
            if not re.match(r"\s*#\s*include\s*<(?:torch|ATen|c10|vector|cstdint)", chunk.code):
                return False
        elif "{" in chunk.code or not re.search(r"\)\s*;\s*$", chunk.code) or "=" in chunk.code:
            return False
    return True


def split_layout(spec: ExtensionSpec, module: str, tc: Toolchain, pch: Path | None) -> Layout:
    """kernels.cu (nvcc, no torch headers) + host.cpp (g++ with the torch PCH). Raises SplitRefused."""
    if not spec.cuda_sources:
        raise SplitRefused("no CUDA sources")
    split = split_cuda_source("\n".join(spec.cuda_sources))
    pch_flags = ["-include", str(pch), "-Winvalid-pch"] if pch else []
    cxx = tc.cxx_flags(spec.extra_cflags) + pch_flags + tc.includes(spec.extra_include_paths)
    nvcc = [f"-DTORCH_EXTENSION_NAME={module}"] + tc.nvcc_flags(spec.extra_cuda_cflags, with_torch=False)
    nvcc += [f"-I{p}" for p in spec.extra_include_paths] + ["-isystem", f"{tc.cuda_home}/include"]
    files = {"kernels.cu": split.device_cu}
    steps = [Step("kernels.cu", "kernels.o", "cuda", nvcc)]
    host = (f"#include <torch/extension.h>\n#undef TORCH_EXTENSION_NAME\n#define TORCH_EXTENSION_NAME {module}\n"
            f"{split.host_cpp}")
    if cpp_is_declarations_only(spec.cpp_sources):
        files["main.cpp"] = _main_cpp(spec, module, host_part=split.host_cpp)
    else:
        files["host.cpp"] = host
        files["main.cpp"] = _main_cpp(spec, module)
        steps.append(Step("host.cpp", "host.o", "cxx", cxx))
    steps.append(Step("main.cpp", "main.o", "cxx", cxx))
    return Layout("split", files, steps)


def whole_layout(spec: ExtensionSpec, module: str, tc: Toolchain, pch: Path | None, note: str = "") -> Layout:
    """load_inline's own layout: main.cpp (cpp_sources + bindings) and cuda.cu (torch headers)."""
    pch_flags = ["-include", str(pch), "-Winvalid-pch"] if pch else []
    cxx = tc.cxx_flags(spec.extra_cflags) + pch_flags + tc.includes(spec.extra_include_paths)
    files = {"main.cpp": _main_cpp(spec, module)}
    steps = [Step("main.cpp", "main.o", "cxx", cxx)]
    if spec.cuda_sources:
        nvcc = [f"-DTORCH_EXTENSION_NAME={module}"] + tc.nvcc_flags(spec.extra_cuda_cflags)
        nvcc += tc.includes(spec.extra_include_paths)
        cuda = "\n".join(spec.cuda_sources)
        files["cuda.cu"] = ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
                            f"#line 1 \"{SOURCE_NAME}\"\n{cuda}\n")
        steps.append(Step("cuda.cu", "cuda.o", "cuda", nvcc))
    return Layout("whole", files, steps, note)
