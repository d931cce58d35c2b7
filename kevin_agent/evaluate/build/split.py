"""The fast-path split of a load_inline CUDA source.

Device code (kernels, ``__device__`` code, device headers) goes to a .cu that nvcc compiles
WITHOUT torch headers; host code that uses torch goes to a .cpp that g++ compiles with a
precompiled torch header, its launches rewritten into calls of generated launchers. Shared,
ODR-safe pieces (macros, types, const/static/inline helpers) go to both. Anything not provably
safe raises ``SplitRefused`` and the build takes the whole (load_inline-shaped) path.
``#line`` directives keep compiler messages on the candidate's own line numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kevin_agent.evaluate.build.chunks import (
    DEVICE_BODY,
    DEVICE_HEADER,
    DEVICE_MARK,
    IDENT,
    ODR_SAFE,
    TORCH_HEADER,
    TORCH_USE,
    TYPE_HEAD,
    Chunk,
    SplitRefused,
    raw_chunks,
)
from kevin_agent.evaluate.build.launch import (
    KernelSignature,
    Launch,
    concrete_template_args,
    find_launches,
    kernel_signature,
    launcher_declaration,
    launcher_definition,
    launcher_instantiation,
    rewrite_launch,
)

SOURCE_NAME = "cuda_sources"  # file name compiler messages show for the candidate's CUDA lines
GENERATED_NAME = "kevin_generated"
DEVICE_PRELUDE = (
    "#include <cuda.h>\n#include <cuda_runtime.h>\n#include <cstdint>\n#include <cstddef>\n"
    "#include <cmath>\n#include <cfloat>\n#include <climits>\n#include <limits>\n"
    "#include <type_traits>\n#include <utility>\n#include <algorithm>\n"
)
HOST_PRELUDE = "#include <cuda.h>\n#include <cuda_runtime.h>\n"

HOST, DEVICE, BOTH = "host", "device", "both"
# Counted before the work (real sources have a few dozen of each): past them the build takes the whole
# path, where only the compilers read the source, confined. The work below is linear besides.
MAX_LAUNCHES = 2000
MAX_CHUNKS = 20000


@dataclass(frozen=True)
class SplitSources:
    """The two generated translation units (each starts with its own prelude)."""

    device_cu: str  # for nvcc, no torch headers
    host_cpp: str  # for g++, to be compiled after #include <torch/extension.h>
    kernels: tuple[str, ...]


def _strip_template_prefix(code: str) -> str:
    m = re.match(r"\s*template\s*<", code)
    if not m:
        return code
    depth = 0
    for i in range(m.end() - 1, len(code)):
        depth += {"<": 1, ">": -1}.get(code[i], 0)
        if depth == 0:
            return code[i + 1 :]
    return code


def _function_name(head: str) -> str | None:
    head = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", _strip_template_prefix(head))
    m = re.search(r"\b([A-Za-z_]\w*)\s*(?:<[^<>()]*>)?\s*\(", head)  # \b: linear in a long name
    return m.group(1) if m else None


def classify(chunk: Chunk) -> None:
    """Set ``kind``, ``name``, ``defines`` and ``uses`` of one chunk."""
    code = chunk.code
    chunk.uses = set(IDENT.findall(code))
    if chunk.preprocessor:
        if "<<<" in code:
            raise SplitRefused(f"kernel launch inside a macro (line {chunk.line})")
        macro = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", code)
        if macro:
            chunk.name = macro.group(1)
            chunk.defines = {chunk.name}
        chunk.kind = ("pp_torch" if TORCH_HEADER.match(code.strip())
                      else "pp_device" if DEVICE_HEADER.match(code.strip()) else "pp_common")
        return
    brace = code.find("{")
    head = code if brace < 0 else code[:brace]
    torch = bool(TORCH_USE.search(code))
    stripped = _strip_template_prefix(head).strip()
    if re.match(r"(?:inline\s+)?namespace\b|extern\s+\"", stripped):
        raise SplitRefused(f"namespace or extern block at line {chunk.line}")
    if "__global__" in head:
        chunk.kind = "kernel"
        chunk.name = _function_name(head)
    elif DEVICE_MARK.search(head) or (TYPE_HEAD.match(head) and (DEVICE_MARK.search(code) or DEVICE_BODY.search(code))):
        chunk.kind = "device"
        chunk.name = _type_or_var_name(head) if TYPE_HEAD.match(head) or "(" not in head else _function_name(head)
    elif torch:
        chunk.kind = "host_torch"
        chunk.name = _function_name(head) if "(" in head and brace >= 0 else _type_or_var_name(head)
    elif TYPE_HEAD.match(head) or re.match(r"\s*(?:typedef|using)\b", head):
        chunk.kind = "type"
        chunk.name = _type_or_var_name(head if brace >= 0 else code)
    elif brace >= 0 and "(" in head and "=" not in head.split("(")[0]:
        chunk.kind = "plain_fn"
        chunk.name = _function_name(head)
    else:
        chunk.kind = "plain_decl"
        prototype = re.search(r"\w\s*\([^)]*\)\s*(?:const\s*)?;\s*$", code)
        chunk.name = _function_name(head) if prototype else _type_or_var_name(code)
    if torch and chunk.kind in ("kernel", "device"):
        raise SplitRefused(f"device code uses torch at line {chunk.line}")
    if chunk.name:
        chunk.defines = {chunk.name}


def _type_or_var_name(text: str) -> str | None:
    text = _strip_template_prefix(text)
    m = re.match(r"\s*(?:typedef\s+)?(?:struct|class|union|enum(?:\s+class)?)\s+"
                 r"(?:__align__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)", text)
    if m and not text.lstrip().startswith("typedef"):
        return m.group(1)
    m = re.match(r"\s*using\s+([A-Za-z_]\w*)\s*=", text)
    if m:
        return m.group(1)
    # a variable or typedef: the identifier before '=', '[', '{', '(' or ';' at the end of the declarator
    m = re.search(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|\{|;|\(|$)", text.split("=")[0] + ";")
    return m.group(1) if m else None


def _place(chunks: list[Chunk]) -> list[str]:
    """Which side(s) each chunk goes to."""
    sides: list[str] = []
    host_chunks = [c for c in chunks if c.kind in ("host_torch", "pp_torch")]
    host_uses = set().union(*(c.uses for c in host_chunks)) if host_chunks else set()
    # names device-side code uses, once (not per declaration: quadratic in a source of many)
    device_uses = set().union(*(c.uses for c in chunks if c.kind in ("kernel", "device", "plain_fn")))
    for chunk in chunks:
        kind = chunk.kind
        if kind in ("pp_torch", "host_torch"):
            sides.append(HOST)
        elif kind == "device" and re.search(r"\b__host__\b", _head(chunk)) and _odr_safe_function(chunk) \
                and not DEVICE_BODY.search(chunk.code) \
                and not re.search(r"\b__(?:global|shared|constant)__\b", chunk.code):
            sides.append(BOTH)  # inline __host__ __device__ helpers compile on both sides
        elif kind in ("pp_device", "kernel", "device"):
            sides.append(DEVICE)
        elif kind in ("pp_common", "type"):
            sides.append(BOTH)
        elif kind == "plain_fn":
            odr_safe = _odr_safe_function(chunk)
            if "<<<" in chunk.code:
                if odr_safe and chunk.name in host_uses:
                    raise SplitRefused(f"static/inline launch helper '{chunk.name}' is called from torch code")
                sides.append(DEVICE)
            else:
                sides.append(BOTH if odr_safe else DEVICE)
        else:  # plain_decl: variables and prototypes
            immutable = re.search(r"\b(?:const|constexpr)\b", chunk.code) and not re.search(r"\bmutable\b", chunk.code)
            prototype = (chunk.name is not None and re.search(r"\)\s*(?:const\s*)?;\s*$", chunk.code)
                         and "=" not in chunk.code)
            if immutable or prototype or chunk.name is None:
                sides.append(BOTH)
            else:
                if chunk.name in device_uses and chunk.name in host_uses:  # a declaration is none of those kinds
                    raise SplitRefused(f"non-const global '{chunk.name}' is used by device and torch code")
                sides.append(HOST if chunk.name in host_uses else DEVICE)
    return sides


def _odr_safe_function(chunk: Chunk) -> bool:
    """Templates and static/inline/constexpr functions may be defined in both translation units."""
    head = _head(chunk)
    if re.match(r"\s*template\s*<", head):
        return True
    return bool(ODR_SAFE.search(re.sub(r"\bconst\b", "", head.split("(")[0])))


def _head(chunk: Chunk) -> str:
    brace = chunk.code.find("{")
    return chunk.code if brace < 0 else chunk.code[:brace]


def _line(n: int, name: str = SOURCE_NAME) -> str:
    return f'#line {n} "{name}"\n'


def _ensure_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def split_cuda_source(source: str) -> SplitSources:
    """Split one (joined) cuda_sources text; raises SplitRefused with the reason to fall back."""
    if "<<<" not in source and "__global__" not in source:
        raise SplitRefused("no kernel in the CUDA source")
    if source.count("<<<") > MAX_LAUNCHES:
        raise SplitRefused(f"more than {MAX_LAUNCHES} kernel launches")
    chunks = raw_chunks(source)
    if len(chunks) > MAX_CHUNKS:
        raise SplitRefused(f"more than {MAX_CHUNKS} top-level declarations")
    for chunk in chunks:
        classify(chunk)
    splitter = _Splitter(chunks, _place(chunks))
    for chunk, side in zip(chunks, splitter.sides):
        splitter.add(chunk, side)
    return splitter.result()


def _kernel_signatures(chunks: list[Chunk]) -> dict[str, KernelSignature]:
    """Every kernel's signature (its definition's, over earlier declarations); no overloads."""
    kernels: dict[str, KernelSignature] = {}
    defined_kernels: set[str] = set()
    for chunk in chunks:
        if chunk.kind == "kernel" and chunk.name:
            defined = "{" in chunk.code
            if defined and chunk.name in defined_kernels:
                raise SplitRefused(f"kernel '{chunk.name}' is overloaded")
            if defined or chunk.name not in kernels:
                kernels[chunk.name] = kernel_signature(chunk.code, chunk.name)
            if defined:
                defined_kernels.add(chunk.name)
    return kernels


class _Splitter:
    """Places each chunk in the kernel file, the host file or both, rewriting launches."""

    def __init__(self, chunks: list[Chunk], sides: list[str]) -> None:
        self.chunks, self.sides = chunks, sides
        self.kernels = _kernel_signatures(chunks)
        placed = list(zip(chunks, sides))
        self.device_only = {n for c, s in placed if s == DEVICE for n in c.defines}
        self.visible_both = {n for c, s in placed if s == BOTH for n in c.defines}
        self.host_only = {n for c, s in placed if s == HOST for n in c.defines}
        self.host_parts: list[str] = [HOST_PRELUDE]
        self.device_parts: list[str] = [DEVICE_PRELUDE]
        self.declared: set[str] = set()
        self.instantiations: list[str] = []
        self.instantiated: set[str] = set()
        self.prototypes = _prototypes(chunks, sides)

    def add(self, chunk: Chunk, side: str) -> None:
        if side in (DEVICE, BOTH):
            if side == DEVICE and chunk.uses & self.host_only:
                name = sorted(chunk.uses & self.host_only)[0]
                raise SplitRefused(f"device code uses host-only name '{name}' (line {chunk.line})")
            self.device_parts.append(_line(chunk.line) + _ensure_newline(chunk.text))
        if side not in (HOST, BOTH):
            return
        launches: list[Launch] = find_launches(chunk.text, chunk.code) if side == HOST else []
        text = self._rewrite_launches(chunk.text, launches)
        if side == HOST:
            self._declare_device_names(chunk, _blank_launches(chunk.code, launches))
        self.host_parts.append(_line(chunk.line) + _ensure_newline(text))

    def _rewrite_launches(self, text: str, launches: list[Launch]) -> str:
        """Each ``k<<<...>>>(...)`` becomes a call of the generated launcher (declared once); the
        text is rebuilt once (launches never overlap: ``find_launches``)."""
        pieces, last = [], 0
        for launch in sorted(launches, key=lambda x: x.start):
            sig = self.kernels.get(launch.kernel)
            if sig is None:
                raise SplitRefused(f"launch of '{launch.kernel}', which is not a kernel of this source")
            self._instantiate(sig, launch)
            pieces += [text[last : launch.start], rewrite_launch(text, launch)]
            last = launch.end
            if launch.kernel not in self.declared:
                self.declared.add(launch.kernel)
                self.host_parts.append(_line(1, GENERATED_NAME) + launcher_declaration(sig) + "\n")
        return "".join(pieces) + text[last:]

    def _instantiate(self, sig: KernelSignature, launch: Launch) -> None:
        if sig.template_params is None:
            if launch.template_args is not None:
                raise SplitRefused(f"kernel '{launch.kernel}' is not a template but is launched with "
                                   "template arguments")
            return
        if launch.template_args is None:
            raise SplitRefused(f"templated kernel '{launch.kernel}' is launched with deduced template arguments")
        for args in concrete_template_args(launch, self.visible_both):
            inst = launcher_instantiation(sig, args)
            if inst not in self.instantiated:
                self.instantiated.add(inst)
                self.instantiations.append(inst)

    def _declare_device_names(self, chunk: Chunk, code: str) -> None:
        """Host code naming a function defined in the kernel file gets its prototype."""
        for name in sorted(set(IDENT.findall(code)) & self.device_only):
            proto = self.prototypes.get(name)
            if proto is None:
                what = ("constant memory written from host code" if "cudaMemcpyToSymbol" in code
                        else f"torch code uses device-side name '{name}'")
                raise SplitRefused(f"{what} (line {chunk.line})")
            if name not in self.declared:
                self.declared.add(name)
                self.host_parts.append(_line(1, GENERATED_NAME) + proto + "\n")

    def result(self) -> SplitSources:
        if not self.kernels:
            raise SplitRefused("no __global__ kernel found")
        device = self.device_parts + [_line(1, GENERATED_NAME)]
        device += [launcher_definition(self.kernels[k]) for k in sorted(self.declared) if k in self.kernels]
        device += [i + "\n" for i in self.instantiations]
        return SplitSources("".join(device), "".join(self.host_parts), tuple(self.kernels))


def _blank_launches(code: str, launches: list[Launch]) -> str:
    pieces, last = [], 0
    for launch in sorted(launches, key=lambda x: x.start):
        pieces += [code[last : launch.start], " " * (launch.end - launch.start)]
        last = launch.end
    return "".join(pieces) + code[last:]


def _prototypes(chunks: list[Chunk], sides: list[str]) -> dict[str, str | None]:
    """For each plain (non-static, non-inline) host function defined in the .cu, its host
    prototype (None where it has none: inline, static, device code in its head); the first
    definition of a name counts. Built once: looked up per name, never searched per name."""
    found: dict[str, str | None] = {}
    for chunk, side in zip(chunks, sides):
        name = chunk.name
        if name and name not in found and chunk.kind == "plain_fn" and side == DEVICE and "{" in chunk.code:
            head = chunk.text[: chunk.code.find("{")].strip()
            found[name] = None if _odr_safe_function(chunk) or DEVICE_BODY.search(head) else head + ";"
    return found
