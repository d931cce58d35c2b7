"""The files of one extension build: the split (fast) layout and load_inline's whole layout.

The candidate's code and ours never share a translation unit: the candidate's objects
(``Layout.own_objects``: its kernels, its host code, its cpp_sources when they define anything)
hold nothing we generated but the launchers that stand in for its own ``<<<...>>>`` launches, and
the pybind11 binding (``PYBIND11_MODULE`` over ``torch::wrap_pybind_function``) is a translation
unit of its own, compiled from declarations of the ``functions``. So the symbols an own object
imports are the candidate's calls (``provenance.imports``), and the preprocessed own translation
units (``Layout.preprocessed``) say which ``__global__`` functions its text defines
(``provenance.origins``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kevin_agent.evaluate.build.chunks import Chunk, SplitRefused, raw_chunks
from kevin_agent.evaluate.build.flags import Toolchain
from kevin_agent.evaluate.build.ninja_file import Step
from kevin_agent.evaluate.build.split import SOURCE_NAME, split_cuda_source
from kevin_agent.evaluate.source.calls import ExtensionSpec
from kevin_agent.evaluate.source.clex import shadow

CPP_NAME = "cpp_sources"
BINDINGS_NAME = "kevin_bindings"
BINDINGS_FILE = "bindings.cpp"
INIT_FILE = "module_init.cpp"
SHARED_MODULE = "kevin_bindings_shared"  # the binding's own name; each module's entry calls it
INIT_ENTRY = "kevin_bindings_init"
BINDING_RECIPE = "kevin-binding-1"  # bump when the binding's text or its compile change meaning


@dataclass(frozen=True)
class Headers:
    """The shared headers a build uses: the binding's precompiled torch (with pybind11), the
    candidate's precompiled torch without Python, and the folders whose <torch/extension.h> is
    each (none for the binding: the real one, on the whole path)."""

    bindings: Path | None = None
    own: Path | None = None
    shim: Path | None = None
    bindings_shim: Path | None = None

    def own_flags(self) -> list[str]:
        return _pch(self.own) + (["-I", str(self.shim)] if self.shim else [])

    def bindings_flags(self) -> list[str]:
        return _pch(self.bindings) + (["-I", str(self.bindings_shim)] if self.bindings_shim else [])


class BindingRefused(Exception):
    """No binding can be generated for the ``functions`` (the message is the compile error)."""


@dataclass
class Layout:
    path: str  # "split" or "whole"
    files: dict[str, str]  # file name -> content
    steps: list[Step]
    note: str = ""  # why the split was refused, when it was
    own_objects: list[str] = field(default_factory=list)  # objects compiled from the candidate's text only
    preprocessed: list[tuple[str, str]] = field(default_factory=list)  # (.ii file, "cuda" or "cxx") of those


def bindings(functions: tuple[str, ...]) -> str:
    """pybind11 bindings for ``functions``, as load_inline generates them, under the shared name, and
    the entry the module's own unit calls (``module_init_cpp``)."""
    defs = "".join(f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");\n' for f in functions)
    return (f'#line 1 "{BINDINGS_NAME}"\nPYBIND11_MODULE({SHARED_MODULE}, m) {{\n{defs}}}\n'
            f'extern "C" PyObject* {INIT_ENTRY}() {{ return PyInit_{SHARED_MODULE}(); }}\n')


def _prefix(module: str) -> str:
    return f"#include <torch/extension.h>\n#undef TORCH_EXTENSION_NAME\n#define TORCH_EXTENSION_NAME {module}\n"


def bindings_cpp(spec: ExtensionSpec, module: str) -> str:
    """Our own translation unit: declarations of the ``functions`` and their pybind11 wrappers. It
    names no module (unless the declarations use TORCH_EXTENSION_NAME), so one task's candidates
    share its object (``shared_objects``). Raises BindingRefused when cpp_sources declare the
    functions in no form we can copy."""
    if not spec.functions:
        return _prefix(SHARED_MODULE) + bindings(())
    cpp = "\n".join(spec.cpp_sources)
    declarations = cpp if cpp_is_declarations_only(spec.cpp_sources) else derived_declarations(cpp, spec.functions)
    name = module if re.search(r"\bTORCH_EXTENSION_NAME\b", declarations) else SHARED_MODULE
    return _prefix(name) + f'#line 1 "{CPP_NAME}"\n{declarations}\n' + bindings(spec.functions)


def module_init_cpp(module: str) -> str:
    """The module's own entry point: ``PyInit_<module>`` handing over to the shared binding's (the
    module's name comes from the importer: pybind11 initialises in phases, from the spec)."""
    return (f'extern "C" struct _object* {INIT_ENTRY}();\n'
            f'extern "C" __attribute__((visibility("default"))) struct _object* PyInit_{module}() '
            f"{{ return {INIT_ENTRY}(); }}\n")


def derived_declarations(cpp: str, functions: tuple[str, ...]) -> str:
    """Declarations of ``functions`` taken from cpp_sources that also define things: each
    function's prototype or definition head (its body dropped), with the source's system
    includes and type aliases before them. BindingRefused names what cannot be bound."""
    try:
        chunks = raw_chunks(cpp)
    except SplitRefused as exc:
        raise BindingRefused(f"cpp_sources could not be read for the binding ({exc}): put only the "
                             "declarations of the bound functions in cpp_sources") from exc
    kept = [c.text for c in chunks if _copyable(c)]
    wanted = set(functions)
    heads: dict[str, str] = {}
    for chunk in chunks:  # one pass: linear in the chunks, whatever the number of functions
        name = _chunk_function(chunk)
        if name in wanted and name not in heads:
            heads[name] = _declaration_of(chunk, name)
    for name in dict.fromkeys(functions):
        head = heads.get(name)
        if head is None:
            raise BindingRefused(f"function '{name}' is bound (functions=[...]) but cpp_sources neither declares "
                                 "nor defines it at the top level: declare it in cpp_sources")
        kept.append(head)
    return "\n".join(kept)


def _copyable(chunk: Chunk) -> bool:
    """System includes and type aliases a declaration may need (nothing that defines code)."""
    if chunk.preprocessor:
        return bool(re.match(r"\s*#\s*include\s*<[\w./]+>\s*$", chunk.code))
    return bool(re.match(r"\s*(?:using|typedef)\b[^{}]*;\s*$", chunk.code))


def _chunk_function(chunk: Chunk) -> str | None:
    """The function a chunk declares or defines, or None."""
    if chunk.preprocessor:
        return None
    brace = chunk.code.find("{")
    head = chunk.code if brace < 0 else chunk.code[:brace]
    return _name_of(head) if "(" in head else None


def _declaration_of(chunk: Chunk, name: str) -> str:
    """``chunk`` (which declares or defines function ``name``) as a declaration: its prototype, or
    its definition's head plus ``;``. BindingRefused for a definition the binding in another
    translation unit cannot reach (static, inline, a template)."""
    brace = chunk.code.find("{")
    head = chunk.code if brace < 0 else chunk.code[:brace]
    if brace < 0:
        return chunk.text.strip()
    if re.search(r"\b(?:static|inline|__forceinline__|template|constexpr)\b", head):
        raise BindingRefused(f"function '{name}' is bound but defined static, inline or as a template in "
                             "cpp_sources: the binding is compiled apart from your code, so define it as a plain "
                             "function (or declare it in cpp_sources and define it in cuda_sources)")
    return chunk.text[:brace].rstrip() + ";"


def _name_of(head: str) -> str | None:
    """The function a declaration head names: the identifier before its parameter list."""
    plain = re.sub(r"__attribute__\s*\(\([^()]*(?:\([^()]*\)[^()]*)*\)\)", " ", head)
    match = re.search(r"\b([A-Za-z_]\w*)\s*\(", plain)
    return match.group(1) if match else None


def cpp_is_declarations_only(cpp_sources: tuple[str, ...]) -> bool:
    """cpp_sources holding only includes and function prototypes define no code of their own."""
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


# NVTX's injection (CUB and Thrust open ranges through it) reads the environment and dlopens a
# library named there: header code that would land in the candidate's objects. Off in its units.
NO_NVTX = ["-DNVTX_DISABLE"]


def _pch(pch: Path | None) -> list[str]:
    return ["-include", str(pch), "-Winvalid-pch"] if pch else []


def _own_cpp(layout: Layout, spec: ExtensionSpec, module: str, cxx: list[str], name: str) -> None:
    """cpp_sources that define code: a candidate translation unit of their own."""
    if cpp_is_declarations_only(spec.cpp_sources):
        return
    layout.files[name] = _prefix(module) + f"#line 1 \"{CPP_NAME}\"\n" + "\n".join(spec.cpp_sources) + "\n"
    _own_step(layout, Step(name, Path(name).stem + ".o", "cxx", cxx))


def _own_step(layout: Layout, step: Step) -> None:
    """Compile ``step`` (a candidate translation unit) and preprocess it for its facts."""
    kind = "cuda" if step.rule == "cuda" else "cxx"
    listing = Path(step.source).stem + ".ii"
    layout.steps += [step, Step(step.source, listing, f"{step.rule}_pp", step.flags)]
    layout.own_objects.append(step.output)
    layout.preprocessed.append((listing, kind))


def refuse_own_binding(spec: ExtensionSpec) -> None:
    """BindingRefused when the sources write a Python binding themselves: it is generated."""
    for text in (*spec.cpp_sources, *spec.cuda_sources):
        if re.search(r"\bPYBIND11_MODULE\b", shadow(text).code):
            raise BindingRefused("the sources define PYBIND11_MODULE: the Python binding is generated from "
                                 "functions=[...] (name the functions to bind there) and your C++ sees torch without "
                                 "pybind11; remove the PYBIND11_MODULE block")


def _bindings_step(layout: Layout, spec: ExtensionSpec, module: str, tc: Toolchain, cxx: list[str]) -> None:
    """The binding (its object shared by every build of the same text and flags) and the module's
    entry point (a unit without headers: milliseconds)."""
    refuse_own_binding(spec)
    text = bindings_cpp(spec, module)
    key = hashlib.sha256(json.dumps([BINDING_RECIPE, tc.fingerprint(), cxx, text]).encode()).hexdigest()
    layout.files[BINDINGS_FILE] = text
    layout.files[INIT_FILE] = module_init_cpp(module)
    layout.steps += [Step(BINDINGS_FILE, "bindings.o", "cxx", cxx, shared_key=key),
                     Step(INIT_FILE, "module_init.o", "cxx", tc.cxx_flags())]


def split_layout(spec: ExtensionSpec, module: str, tc: Toolchain, headers: Headers | None = None) -> Layout:
    """kernels.cu (nvcc, no torch headers) + host.cpp (g++ with the torch PCH) [+ cpp.cpp] + the
    binding. Raises SplitRefused (or BindingRefused)."""
    if not spec.cuda_sources:
        raise SplitRefused("no CUDA sources")
    split = split_cuda_source("\n".join(spec.cuda_sources))
    headers = headers or Headers()
    cxx = tc.cxx_flags(spec.extra_cflags) + headers.own_flags() + tc.includes(spec.extra_include_paths)
    nvcc = [f"-DTORCH_EXTENSION_NAME={module}", *NO_NVTX] + tc.nvcc_flags(spec.extra_cuda_cflags, with_torch=False)
    nvcc += [f"-I{p}" for p in spec.extra_include_paths] + ["-isystem", f"{tc.cuda_home}/include"]
    layout = Layout("split", {"kernels.cu": split.device_cu, "host.cpp": _prefix(module) + split.host_cpp}, [])
    _own_step(layout, Step("kernels.cu", "kernels.o", "cuda", nvcc))
    _own_step(layout, Step("host.cpp", "host.o", "cxx", cxx))
    _own_cpp(layout, spec, module, cxx, "cpp.cpp")
    _bindings_step(layout, spec, module, tc, tc.cxx_flags(spec.extra_cflags) + headers.bindings_flags() + tc.includes())
    return layout


def whole_layout(spec: ExtensionSpec, module: str, tc: Toolchain, headers: Headers | None = None,
                 note: str = "") -> Layout:
    """load_inline's own layout, its binding apart: cuda.cu (torch headers), main.cpp (cpp_sources,
    when they define code) and the binding. Raises BindingRefused."""
    headers = headers or Headers()
    cxx = tc.cxx_flags(spec.extra_cflags) + headers.own_flags() + tc.includes(spec.extra_include_paths)
    layout = Layout("whole", {}, [], note)
    if spec.cuda_sources:
        nvcc = [f"-DTORCH_EXTENSION_NAME={module}", *NO_NVTX] + tc.nvcc_flags(spec.extra_cuda_cflags)
        nvcc += (["-I", str(headers.shim)] if headers.shim else []) + tc.includes(spec.extra_include_paths)
        cuda = "\n".join(spec.cuda_sources)
        layout.files["cuda.cu"] = ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
                                   f"#line 1 \"{SOURCE_NAME}\"\n{cuda}\n")
        _own_step(layout, Step("cuda.cu", "cuda.o", "cuda", nvcc))
    _own_cpp(layout, spec, module, cxx, "main.cpp")
    _bindings_step(layout, spec, module, tc, tc.cxx_flags(spec.extra_cflags) + headers.bindings_flags() + tc.includes())
    return layout
