"""The parsed view of a candidate that every static rule reads: AST, import aliases, the CUDA/C++
source strings, the ModelNew class, the load_inline extensions and which code is forward-path."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional

from kevin_agent.evaluate.source.calls import bind_arguments, is_load_inline_call
from kevin_agent.evaluate.source.clex import shadow
from kevin_agent.evaluate.source.consts import NotStatic

LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
INPUT_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})

# Region of code a node sits in: "module" (top level), "init" (an __init__ body: parameter set-up,
# allowed to use torch freely) or "forward" (any other function: what runs on every call).
Region = str


@dataclass(frozen=True)
class CudaSource:
    text: str  # comments and string literals blanked, newlines kept
    raw: str
    line: int  # line of the Python string constant that holds it

    def line_of(self, offset: int) -> int:
        return self.line + self.raw.count("\n", 0, offset)


@dataclass
class CandidateContext:
    code: str
    tree: ast.Module
    task_classes: frozenset[str] = frozenset()
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted path
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    model_new: Optional[ast.ClassDef] = None
    load_inline_calls: list[ast.Call] = field(default_factory=list)
    extension_names: set[str] = field(default_factory=set)  # names/self attrs bound to extensions
    extension_functions: set[str] = field(default_factory=set)  # functions=[...] of load_inline
    cuda_sources: list[CudaSource] = field(default_factory=list)
    regions: dict[int, Region] = field(default_factory=dict)  # id(node) -> region
    skipped_classes: set[str] = field(default_factory=set)  # an unused copy of Model
    _parents: dict[int, ast.AST] = field(default_factory=dict)

    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        if not self._parents:
            for parent in ast.walk(self.tree):
                for child in ast.iter_child_nodes(parent):
                    self._parents[id(child)] = parent
        return self._parents.get(id(node))

    def qualname(self, node: ast.AST) -> Optional[str]:
        """Dotted path of a Name/Attribute rooted at an import, e.g. ``F.relu`` -> torch.nn.functional.relu."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            base = self.qualname(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def region(self, node: Optional[ast.AST]) -> Optional[Region]:
        """Region of a node, None for exempt code (input functions, main guard, unused Model)."""
        return self.regions.get(id(node))

    def nodes(self, *regions: Region) -> Iterator[ast.AST]:
        """Every checked node, optionally only those in the given regions, in source order."""
        for node in ast.walk(self.tree):
            region = self.regions.get(id(node))
            if region is not None and (not regions or region in regions):
                yield node

    def is_extension(self, node: ast.AST) -> bool:
        """True for a name or ``self.x`` bound to a load_inline result."""
        return _target_key(node) in self.extension_names


def build_context(code: str, tree: ast.Module, task_source: Optional[str] = None) -> CandidateContext:
    ctx = CandidateContext(code=code, tree=tree, task_classes=_task_class_names(task_source))
    _collect_aliases(ctx)
    ctx.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    ctx.model_new = ctx.classes.get("ModelNew")
    _collect_extensions(ctx)
    _collect_cuda_sources(ctx)
    _mark_regions(ctx)
    return ctx


def _task_class_names(task_source: Optional[str]) -> frozenset[str]:
    names = {"Model"}
    if task_source:
        try:
            names |= {n.name for n in ast.parse(task_source).body if isinstance(n, ast.ClassDef)}
        except SyntaxError:
            pass
    return frozenset(names)


def _collect_aliases(ctx: CandidateContext) -> None:
    """Imports anywhere, plus simple ``mm = torch.matmul`` re-bindings (two passes for chains)."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    ctx.aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    ctx.aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                ctx.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for _ in range(2):
        for node in ast.walk(ctx.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                path = ctx.qualname(node.value)
                if path and node.targets[0].id not in ctx.aliases:
                    ctx.aliases[node.targets[0].id] = path


def _is_load_inline(ctx: CandidateContext, call: ast.Call) -> bool:
    func = call.func
    return ctx.qualname(func) == LOAD_INLINE or is_load_inline_call(call)


def _target_key(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _collect_extensions(ctx: CandidateContext) -> None:
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Call) and _is_load_inline(ctx, node):
            ctx.load_inline_calls.append(node)
            functions = _argument(node, "functions")
            if functions is not None:
                ctx.extension_functions |= {
                    c.value for c in ast.walk(functions) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    # Names bound to an extension, then names/self attributes bound to those names (two passes).
    for _ in range(2):
        for node in ast.walk(ctx.tree):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            value = node.value
            bound = ((isinstance(value, ast.Call) and _is_load_inline(ctx, value))
                     or _target_key(value) in ctx.extension_names)
            if bound:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                ctx.extension_names |= {k for k in map(_target_key, targets) if k}


def _argument(call: ast.Call, name: str) -> Optional[ast.expr]:
    """The expression passed for parameter ``name`` (torch's signature: positional or keyword)."""
    try:
        return bind_arguments(call).get(name)
    except NotStatic:  # *args / **kwargs: only the explicit keywords are known
        return next((k.value for k in call.keywords if k.arg == name), None)


_C_MARKERS = re.compile(r"__global__|#\s*include|<<<|torch::|at::|__device__")


def _collect_cuda_sources(ctx: CandidateContext) -> None:
    """String constants handed to load_inline (following names), plus any string holding C/CUDA code."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
    strings: dict[int, ast.Constant] = {}

    def gather(expr: ast.AST, seen: set[str]) -> None:
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                strings[id(sub)] = sub
            elif isinstance(sub, ast.Name) and sub.id in assigned and sub.id not in seen:
                seen.add(sub.id)
                for value in assigned[sub.id]:
                    gather(value, seen)

    for call in ctx.load_inline_calls:
        for name in ("cpp_sources", "cuda_sources", "extra_cuda_cflags", "extra_cflags"):
            arg = _argument(call, name)
            if arg is not None:
                gather(arg, set())
    docstrings = _docstring_ids(ctx.tree)
    for node in ast.walk(ctx.tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and _C_MARKERS.search(node.value)):
            strings[id(node)] = node
    for const in sorted(strings.values(), key=lambda c: (c.lineno, c.col_offset)):
        raw = str(const.value)  # only str constants were gathered
        ctx.cuda_sources.append(CudaSource(text=strip_c_comments(raw), raw=raw, line=const.lineno))


def _docstring_ids(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def strip_c_comments(source: str) -> str:
    """Blank out C/C++ comments and string/char literals, keeping offsets, newlines and
    ``#include "file.h"`` (the one C lexer, ``source.clex``)."""
    return shadow(source, fill=" ", keep_include_paths=True).code


def _mark_regions(ctx: CandidateContext) -> None:
    # The task's classes count as referenced when anything outside their own definition names them.
    referenced = set()
    for statement in ctx.tree.body:
        if not (isinstance(statement, ast.ClassDef) and statement.name in ctx.task_classes):
            referenced |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
    for name in ctx.task_classes:
        if name in ctx.classes and name != "ModelNew" and name not in referenced:
            ctx.skipped_classes.add(name)

    def visit(node: ast.AST, region: Region) -> None:
        if _is_exempt(ctx, node):
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            name = getattr(node, "name", "<lambda>")
            if region != "forward":  # nested functions inherit a forward region
                region = "init" if name == "__init__" else "forward"
        ctx.regions[id(node)] = region
        for child in ast.iter_child_nodes(node):
            visit(child, region)

    for statement in ctx.tree.body:
        visit(statement, "module")


def _is_exempt(ctx: CandidateContext, node: ast.AST) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in INPUT_FUNCTIONS:
        return True
    if isinstance(node, ast.ClassDef) and node.name in ctx.skipped_classes:
        return True
    if isinstance(node, ast.If):
        test = node.test
        return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
                and test.left.id == "__name__")
    return False
