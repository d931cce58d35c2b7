"""Static rules over the candidate's Python: structure, fallbacks, reference reuse, concurrency,
patching, hidden code and output caching."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TypeGuard

from kevin_agent.evaluate.static import tables as T
from kevin_agent.evaluate.static.context import CandidateContext
from kevin_agent.evaluate.static.rule import Violation


def _line(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def _imports(ctx: CandidateContext) -> Iterator[tuple[ast.AST, list[str]]]:
    """(import statement, dotted names it brings in) for every import in checked code."""
    for node in ctx.nodes():
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node, [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]


def _first_match(modules: list[str], names: frozenset[str]) -> str | None:
    for module in modules:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in names:
                return ".".join(parts[:i])
    return None


def check_model_new(ctx: CandidateContext) -> Iterator[Violation]:
    if ctx.model_new is None:
        yield Violation("no-model-new", None,
                        "Define `class ModelNew(nn.Module)` at module level with the same constructor and "
                        "forward signature as Model.")


def check_load_inline(ctx: CandidateContext) -> Iterator[Violation]:
    if not ctx.load_inline_calls:
        yield Violation("no-load-inline", None,
                        "No load_inline call: compile your CUDA code with torch.utils.cpp_extension.load_inline("
                        "name=..., cpp_sources=..., cuda_sources=..., functions=[...]) and call the functions "
                        "it returns from ModelNew.forward.")


def check_empty_forward(ctx: CandidateContext) -> Iterator[Violation]:
    if ctx.model_new is None:
        return
    forward = next((n for n in ctx.model_new.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward"), None)
    if forward is None and _inherits_own_forward(ctx, ctx.model_new):
        return
    if forward is None:
        yield Violation("empty-forward", ctx.model_new.lineno,
                        "ModelNew has no forward method: define forward with the same signature as Model.forward "
                        "and compute the result with your CUDA kernels.")
        return
    body = [s for s in forward.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
    if all(_is_placeholder(s) for s in body):
        yield Violation("empty-forward", forward.lineno,
                        "ModelNew.forward has an empty body (pass / ... / NotImplementedError): implement it by "
                        "calling your CUDA kernels and returning their output.")


def _inherits_own_forward(ctx: CandidateContext, cls: ast.ClassDef, depth: int = 0) -> bool:
    """A base class of the candidate's own (not a task class) defines forward."""
    for base in cls.bases:
        name = base.id if isinstance(base, ast.Name) else None
        own = ctx.classes.get(name) if name and name not in ctx.task_classes else None
        if own is None or own is cls or depth > 8:
            continue
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward" for n in own.body):
            return True
        if _inherits_own_forward(ctx, own, depth + 1):
            return True
    return False


def _is_placeholder(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and statement.value.value is Ellipsis):
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def check_try_except(ctx: CandidateContext) -> Iterator[Violation]:
    try_types = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)
    for node in ctx.nodes():
        if isinstance(node, try_types) and node.handlers:
            yield Violation("try-except", node.lineno,
                            "Remove the try/except: a fallback to PyTorch is rejected; let errors from the CUDA "
                            "extension surface so they can be fixed.")
        elif isinstance(node, ast.Call) and (ctx.qualname(node.func) or "").endswith("contextlib.suppress"):
            yield Violation("try-except", node.lineno,
                            "Remove contextlib.suppress: swallowing errors hides a fallback; let errors surface.")


def check_subclass_reference(ctx: CandidateContext) -> Iterator[Violation]:
    for cls in ctx.classes.values():
        if cls.name in ctx.skipped_classes:
            continue
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            if base_name in ctx.task_classes:
                yield Violation("subclass-reference", cls.lineno,
                                f"Class {cls.name} inherits from the reference {base_name}: derive ModelNew from "
                                "nn.Module and reimplement forward with your own CUDA kernels.")
            elif cls.name == "ModelNew" and ctx.qualname(base) != "torch.nn.Module" and not (
                    base_name in ctx.classes and base_name not in ctx.task_classes):  # its own helper base
                shown = ast.unparse(base)
                yield Violation("subclass-reference", cls.lineno,
                                f"ModelNew derives from {shown}: its only base must be nn.Module (torch.nn.Module).")


def check_reference_use(ctx: CandidateContext) -> Iterator[Violation]:
    own_classes = set(ctx.classes) - ctx.skipped_classes - {"Model"}
    for node in ctx.nodes():
        if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in ctx.task_classes
                and node.id not in own_classes and node.id != "ModelNew"):
            yield Violation("reference-use", node.lineno,
                            f"The candidate uses the reference class {node.id}: ModelNew must not build, call or "
                            "inherit the reference; compute everything with your own kernels.")


def check_threads_processes(ctx: CandidateContext) -> Iterator[Violation]:
    for node, modules in _imports(ctx):
        module = _first_match(modules, T.CONCURRENCY_MODULES)
        if module:
            yield Violation("threads-processes", _line(node),
                            f"Do not import {module}: "
                            "threads, processes and async work are not allowed; run all work in CUDA kernels on "
                            "the current stream.")
    for node in ctx.nodes():
        if isinstance(node, ast.Call):
            path = ctx.qualname(node.func) or ""
            if path.startswith("os.") and path[3:] in T.OS_PROCESS_CALLS:
                yield Violation("threads-processes", node.lineno,
                                f"Do not call {path}: starting, replacing or killing processes is not allowed.")
    for source in ctx.cuda_sources:
        for pattern in T.CPP_CONCURRENCY_PATTERNS:
            for match in re.finditer(pattern, source.text):
                yield Violation("threads-processes", source.line_of(match.start()),
                                f"The C++/CUDA source uses {match.group(0).strip()}: host threads, processes and "
                                "host callbacks are not allowed; do the work in kernels on the current stream.")


def check_patching(ctx: CandidateContext) -> Iterator[Violation]:
    for node in ctx.nodes():
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(target, (ast.Attribute, ast.Subscript)) and ctx.qualname(base):
                yield Violation("patching", node.lineno if isinstance(node, ast.stmt) else target.lineno,
                                f"Do not assign to {ast.unparse(target)}: patching torch, timing or other modules "
                                "is not allowed.")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in T.MUTATING_BUILTINS \
                and node.func.id not in ctx.aliases and node.args and ctx.qualname(node.args[0]):
            yield Violation("patching", node.lineno,
                            f"Do not {node.func.id} on {ast.unparse(node.args[0])}: patching modules is not allowed.")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            yield Violation("patching", node.lineno, "Do not touch __builtins__: patching Python is not allowed.")
        name = node.attr if isinstance(node, ast.Attribute) else node.name if isinstance(
            node, (ast.FunctionDef, ast.ClassDef)) else node.id if isinstance(node, ast.Name) else None
        if name in T.TORCH_INTERCEPT_NAMES:
            yield Violation("patching", _line(node),
                            f"Do not use {name}: intercepting torch operators (the reference's included) is not "
                            "allowed.")
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(getattr(node, "ctx", None), ast.Load):
            path = ctx.qualname(node) or ""
            if path.startswith(("torch.library", "torch._C", "torch.overrides", "torch.utils._python_dispatch")) \
                    and not _inside_attribute(ctx, node):
                yield Violation("patching", node.lineno,
                                f"Do not use {path}: torch internals and operator registration are not allowed.")
            elif path.startswith(("torch.set_", "torch.use_deterministic_algorithms")) \
                    and path != "torch.set_grad_enabled":
                yield Violation("patching", node.lineno,
                                f"Do not call {path}: changing torch's global settings changes the reference too.")
            elif path in {"sys.modules", "sys.settrace", "sys.setprofile", "sys.meta_path", "sys.path_hooks",
                          "sys.exit", "os._exit", "os.environ", "os.putenv"}:
                yield Violation("patching", node.lineno,
                                f"Do not use {path}: changing the interpreter, its modules or environment, or "
                                "exiting, is not allowed.")
    for node, modules in _imports(ctx):
        module = _first_match(modules, T.PATCHING_MODULES)
        if module:
            yield Violation("patching", _line(node),
                            f"Do not import {module}: patching Python, imports or exit hooks is not allowed.")


def _inside_attribute(ctx: CandidateContext, node: ast.AST) -> bool:
    """True when node is the value of a longer attribute chain, so torch._C._foo is reported once."""
    parent = ctx.parent(node)
    return isinstance(parent, ast.Attribute) and parent.value is node


def check_introspection(ctx: CandidateContext) -> Iterator[Violation]:
    for node, modules in _imports(ctx):
        module = _first_match(modules, T.INTROSPECTION_MODULES | {"__main__"})
        if module:
            yield Violation("introspection", _line(node),
                            f"Do not import {module}: inspecting the interpreter, the evaluator or the reference "
                            "module is not allowed.")
    yield from _profiler_use(ctx)
    for node in ctx.nodes():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in T.INTROSPECTION_BUILTINS and node.func.id not in ctx.aliases:
            yield Violation("introspection", node.lineno,
                            f"Do not call {node.func.id}(): reading other code's variables is not allowed.")
        elif isinstance(node, ast.Attribute) and node.attr in {
                "__globals__", "__subclasses__", "__code__", "__closure__", "f_back", "f_globals", "f_locals",
                "_getframe", "__reduce__", "__reduce_ex__"}:
            yield Violation("introspection", node.lineno,
                            f"Do not use .{node.attr}: reaching into frames, globals or other objects is not "
                            "allowed.")


def _profiler_use(ctx: CandidateContext) -> Iterator[Violation]:
    """Reading or steering the profiler (Python or C++): code that knows it is being profiled can
    behave differently then."""
    message = ("Do not use {what}: the evaluator profiles your forward call, and code that reads or "
               "controls the profiler is not allowed.")
    def profiler(path: str) -> bool:
        return any(path == m or path.startswith(m + ".") for m in T.PROFILER_MODULES)

    for node, modules in _imports(ctx):
        hit = next((m for m in modules if profiler(m)), None)
        if hit:
            yield Violation("introspection", _line(node), message.format(what=hit))
    for node in ctx.nodes():
        if isinstance(node, (ast.Attribute, ast.Name)) and not _inside_attribute(ctx, node):
            path = ctx.qualname(node) or ""
            if profiler(path):
                yield Violation("introspection", node.lineno, message.format(what=path))
    for source in ctx.cuda_sources:
        for pattern in T.CPP_PROFILER_PATTERNS:
            for match in re.finditer(pattern, source.text):
                yield Violation("introspection", source.line_of(match.start()), message.format(what=match.group(0)))


def check_hidden_code(ctx: CandidateContext) -> Iterator[Violation]:
    for node, modules in _imports(ctx):
        module = _first_match(modules, T.HIDDEN_CODE_MODULES)
        if module:
            yield Violation("hidden-code", _line(node),
                            f"Do not import {module}: the kernel must be raw CUDA in load_inline "
                            "sources, with no other compilers, foreign libraries or serialized code.")
    for node in ctx.nodes():
        if not isinstance(node, ast.Call):
            continue
        if (isinstance(node.func, ast.Name) and node.func.id in T.HIDDEN_CODE_BUILTINS
                and node.func.id not in ctx.aliases):
            yield Violation("hidden-code", node.lineno,
                            f"Do not call {node.func.id}(): all code must be visible in the answer (no exec/eval, "
                            "dynamic imports or reading files).")
        path = ctx.qualname(node.func) or ""
        if path in {"torch.utils.cpp_extension.load", "torch.ops.load_library", "torch.load", "torch.save",
                    "torch.hub.load", "numpy.load"} or path.startswith("importlib."):
            yield Violation("hidden-code", node.lineno,
                            f"Do not call {path}: build only from the inline sources in your answer with "
                            "load_inline, and load no files.")
    for source in ctx.cuda_sources:
        for pattern in T.CPP_PATCHING_PATTERNS:
            for match in re.finditer(pattern, source.text):
                yield Violation("hidden-code", source.line_of(match.start()),
                                f"The C++/CUDA source uses {match.group(0).rstrip('( ')}: loading symbols or "
                                "running commands is not allowed.")


def check_output_cache(ctx: CandidateContext) -> Iterator[Violation]:
    for node in ctx.nodes():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                path = ctx.qualname(target) or (target.id if isinstance(target, ast.Name) else "")
                takes_arguments = bool(node.args.args or node.args.vararg or node.args.kwonlyargs)
                if path.split(".")[-1] in {"lru_cache", "cache", "cached"} and takes_arguments:
                    yield Violation("output-cache", decorator.lineno,
                                    f"Do not memoize {node.name} with {path}: outputs must be recomputed on every "
                                    "call.")
    if ctx.model_new is None:
        return
    written = _self_attrs_written_outside_init(ctx)
    for node in ast.walk(ctx.model_new):
        if ctx.region(node) != "forward":
            continue
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Subscript) and _is_self_attr(target.value) \
                        and not _is_allocation(ctx, node.value):
                    yield Violation("output-cache", node.lineno,
                                    f"ModelNew.forward stores into {ast.unparse(target.value)}[...]: caching results "
                                    "across calls is not allowed; recompute the output on every call.")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id":
            yield Violation("output-cache", node.lineno,
                            "Do not key anything on id(...) of the inputs: results must not be cached across calls.")
        elif isinstance(node, ast.Return) and node.value is not None and _is_self_attr(node.value) \
                and node.value.attr in written:
            yield Violation("output-cache", node.lineno,
                            f"ModelNew.forward returns {ast.unparse(node.value)}, state kept from an earlier call: "
                            "return a tensor your kernel wrote in this call.")


def _is_allocation(ctx: CandidateContext, node: ast.AST) -> bool:
    """A torch.empty/zeros/... call: caching a workspace buffer is fine, caching results is not."""
    return isinstance(node, ast.Call) and (ctx.qualname(node.func) or "") in {
        f"torch.{name}" for name in ("empty", "empty_like", "zeros", "zeros_like", "ones", "full", "empty_strided")}


def _is_self_attr(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _self_attrs_written_outside_init(ctx: CandidateContext) -> set[str]:
    assert ctx.model_new is not None
    names = set()
    for node in ast.walk(ctx.model_new):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and ctx.region(node) == "forward":
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if _is_self_attr(target):
                    names.add(target.attr)
    return names
