"""Static rules over the CUDA/C++ strings of a candidate (comments and string literals blanked):
kernels present, launched and non-empty; no ATen compute or vendor libraries in the wrapper; no
extra streams (Python or C++)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Optional

from kevin_agent.evaluate.static import tables as T
from kevin_agent.evaluate.static.context import CandidateContext, CudaSource
from kevin_agent.evaluate.static.rule import Violation

# a kernel launch: <<<>>>, the runtime and driver launch calls, or a CUDA graph's launch (its kernel
# nodes are added by cudaGraphAddKernelNode; provenance then sees what ran)
_LAUNCH = re.compile(r"<<<|\bcudaLaunch(?:Cooperative)?Kernel\w*\b|\bcuLaunchKernel\w*\b|\bcu(?:da)?GraphLaunch\b")
_GLOBAL = re.compile(r"\b__global__\b")
_NAME_PAREN = re.compile(r"\b(\w+)\s*\(")
_SKIP_BEFORE_NAME = frozenset({"__launch_bounds__", "__attribute__", "__align__", "__declspec", "alignas"})
# At most 8 nested namespaces (ATen's deepest is 3): an unbounded ``(?:\w+::)*`` backtracked over
# "at::at::at::..." from every start, quadratic in the source (a 1 MB answer held the judge for an hour).
_CPP_TORCH_CALL = re.compile(r"\b(?:torch|at)::((?:\w+::){0,8})(\w+)\s*(?:<[^<>;()]*>\s*)?\(")
_NAME_WINDOW = 512  # characters after __global__ in which the kernel's name is looked for
_SPACE = re.compile(r"\s*")
_EMPTY_BODY = re.compile(r"[\s;]*(?:return\s*;[\s;]*)?")
_CPP_METHOD_CALL = re.compile(r"[\w\)\]]\s*(?:\.|->)\s*(\w+)\s*\(")


def check_global_kernel(ctx: CandidateContext) -> Iterator[Violation]:
    if not any(_GLOBAL.search(s.text) for s in ctx.cuda_sources):
        yield Violation("no-global-kernel", None,
                        "No __global__ kernel found: write the computation as your own CUDA kernel "
                        "(`__global__ void name(...)`) in cuda_sources and launch it from a host wrapper with "
                        "<<<blocks, threads>>>.")


def check_kernel_launch(ctx: CandidateContext) -> Iterator[Violation]:
    kernels = [s for s in ctx.cuda_sources if _GLOBAL.search(s.text)]
    if kernels and not any(_LAUNCH.search(s.text) for s in ctx.cuda_sources):
        yield Violation("no-kernel-launch", kernels[0].line,
                        "Your __global__ kernel is never launched: launch it with kernel<<<blocks, threads>>>(...) "
                        "from the host wrapper that load_inline exposes, and return its output.")


def kernel_bodies(source: CudaSource) -> Iterator[tuple[str, int, int, int]]:
    """(kernel name, offset of __global__, start and end of its body) for every __global__ function
    definition. Linear in the source: brackets are paired once, nothing is sliced per kernel."""
    text = source.text
    parens, braces = _pairs(text, "(", ")"), _pairs(text, "{", "}")
    for match in _GLOBAL.finditer(text):
        position = match.end()
        name = None
        for candidate in _NAME_PAREN.finditer(text, position, position + _NAME_WINDOW):
            if candidate.group(1) in _SKIP_BEFORE_NAME:
                continue
            name, position = candidate.group(1), candidate.end() - 1
            break
        if name is None:
            continue
        close = parens.get(position)
        if close is None:
            continue
        open_brace = _SPACE.match(text, close + 1).end()  # type: ignore[union-attr]  # \s* always matches
        if not text.startswith("{", open_brace):
            continue  # a declaration
        end = braces.get(open_brace)
        if end is not None:
            yield name, match.start(), open_brace + 1, end


def _pairs(text: str, opening: str, closing: str) -> dict[int, int]:
    """Index of each ``opening`` bracket -> index of its ``closing`` one (unclosed ones absent)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in re.finditer(f"[{re.escape(opening)}{re.escape(closing)}]", text):
        if match.group() == opening:
            stack.append(match.start())
        elif stack:
            pairs[stack.pop()] = match.start()
    return pairs


def check_empty_kernel(ctx: CandidateContext) -> Iterator[Violation]:
    for source in ctx.cuda_sources:
        for name, offset, start, end in kernel_bodies(source):
            if _EMPTY_BODY.fullmatch(source.text, start, end):
                yield Violation("empty-kernel", source.line_of(offset),
                                f"The kernel {name} has an empty body: it must compute and write the output.")


def check_cpp_torch_compute(ctx: CandidateContext) -> Iterator[Violation]:
    for source in ctx.cuda_sources:
        for match in _CPP_TORCH_CALL.finditer(source.text):
            namespaces, name = match.group(1), match.group(2)
            if name in T.ALLOWED_CPP_TORCH_CALLS or name == "getStreamFromPool" or \
                    (name.startswith("k") and name[1:2].isupper()) or namespaces.startswith(("indexing::", "detail::")):
                continue
            yield Violation("cpp-torch-compute", source.line_of(match.start()),
                            f"The C++ wrapper calls {match.group(0).rstrip('( ')}: ATen/LibTorch compute is "
                            "PyTorch doing the work; write it as your own __global__ kernel (only allocation such "
                            "as torch::empty, tensor metadata and the current stream may use torch in C++).")
        for match in _CPP_METHOD_CALL.finditer(source.text):
            if match.group(1) in T.CPP_TENSOR_COMPUTE_METHODS:
                yield Violation("cpp-torch-compute", source.line_of(match.start()),
                                f"The C++ source calls the tensor method .{match.group(1)}(): ATen compute is "
                                "PyTorch doing the work; do it inside your own __global__ kernel.")


def check_library_calls(ctx: CandidateContext) -> Iterator[Violation]:
    for source in ctx.cuda_sources:
        for pattern, library in T.LIBRARY_PATTERNS:
            match = re.search(pattern, source.text)
            if match:
                yield Violation("library-call", source.line_of(match.start()),
                                f"The CUDA source uses {library} ({match.group(0)}): vendor library routines are "
                                "not your own kernel; implement the computation in a __global__ kernel "
                                "(warp/block-level primitives such as cub::BlockReduce stay allowed).")


def check_extra_stream(ctx: CandidateContext) -> Iterator[Violation]:
    current = _current_stream_names(ctx)
    for node in ctx.nodes():
        if isinstance(node, (ast.Attribute, ast.Name)) and not _inside_attribute(ctx, node):
            path = ctx.qualname(node) or ""
            parts = path.split(".")
            if path.startswith("torch.") and (
                    parts[-1] in T.TORCH_STREAM_NAMES and parts[1] in {"cuda", "Stream"}
                    or path == "torch.Stream" or path.startswith(("torch.cuda.streams", "torch.cuda.Stream."))):
                yield Violation("extra-stream", node.lineno,
                                f"Do not use {path}: run every kernel on PyTorch's current stream (launch with "
                                "<<<blocks, threads>>> or pass at::cuda::getCurrentCUDAStream()); work on other "
                                "streams escapes timing.")
            elif isinstance(node, ast.Attribute) and node.attr == "cuda_stream" and not (
                    _current_stream(ctx, node.value) or _stream_key(node.value) in current):
                yield Violation("extra-stream", node.lineno,
                                "Do not pass raw stream handles (.cuda_stream) to the extension: launch on the "
                                "current stream.")
    for source in ctx.cuda_sources:
        for pattern in T.CUDA_STREAM_PATTERNS:
            for match in re.finditer(pattern, source.text):
                yield Violation("extra-stream", source.line_of(match.start()),
                                f"The CUDA source uses {match.group(0)}: create no streams and use no per-thread "
                                "or non-blocking streams; launch on PyTorch's current stream "
                                "(<<<blocks, threads>>> or at::cuda::getCurrentCUDAStream()).")


def _inside_attribute(ctx: CandidateContext, node: ast.AST) -> bool:
    parent = ctx.parent(node)
    return isinstance(parent, ast.Attribute) and parent.value is node


def _stream_key(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _current_stream_names(ctx: CandidateContext) -> set[str]:
    """Names (and ``self.x``) only ever bound to ``torch.cuda.current_stream()`` /
    ``default_stream()``: ``stream = torch.cuda.current_stream(); stream.cuda_stream`` is fine."""
    current: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            keys = {k for k in map(_stream_key, targets) if k}
            (current if _current_stream(ctx, node.value) else other).update(keys)
        elif isinstance(node, (ast.For, ast.With, ast.NamedExpr, ast.AugAssign)):
            bound = [node.target] if isinstance(node, (ast.For, ast.NamedExpr, ast.AugAssign)) else \
                [item.optional_vars for item in node.items if item.optional_vars is not None]
            other.update(k for t in bound for k in map(_stream_key, ast.walk(t)) if k)
    return current - other


def _current_stream(ctx: CandidateContext, node: ast.AST) -> bool:
    """``torch.cuda.current_stream()`` / ``default_stream()``: passing its handle is fine."""
    return isinstance(node, ast.Call) and (ctx.qualname(node.func) or "") in {
        "torch.cuda.current_stream", "torch.cuda.default_stream"}
