"""The one model of a candidate's ``load_inline`` calls, wherever they are read.

Arguments are matched to parameters through torch's own signature (positional or keyword, with
the name positional as in KernelBench's examples), statically by ``bind_arguments`` (the static
checks, accept) and ``extract_static`` (the build), and at run time by ``spec_from_call`` (the
recorder child and the GPU worker's hook), so all of them key the build cache alike.
Standard library only.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevin_agent.evaluate.source.ast_lock import PARSE_LOCK
from kevin_agent.evaluate.source.consts import Budget, ConstEval, NotStatic, bind_assignments

# Parameter order of load_inline in torch 2.4 ... 2.14 (sycl_sources arrived in 2.7, after
# cuda_sources). Positional calls past the third argument are resolved with torch's own signature
# when torch is importable, else with the newest order below.
_NEW_ORDER = (
    "name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
    "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
)
SPEC_FIELDS = (
    "name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
    "extra_ldflags", "extra_include_paths",
)


@dataclass(frozen=True)
class ExtensionSpec:
    """The arguments of one load_inline call that decide what gets built."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ExtensionSpec:
        return spec_from_kwargs(raw)


@functools.lru_cache(maxsize=1)
def load_inline_parameter_order() -> tuple[str, ...]:
    """Positional parameter names of the installed torch's load_inline (newest order if absent).

    Read from torch's source file, not from the live function: torch is not imported (the static
    checks stay fast) and a hooked or recording load_inline cannot change the answer."""
    try:
        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return _NEW_ORDER
        path = Path(origin).parent / "utils" / "cpp_extension.py"
        with PARSE_LOCK:  # threads must not parse at once (ast_lock)
            tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, ImportError):
        return _NEW_ORDER
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "load_inline":
            names = tuple(a.arg for a in node.args.posonlyargs + node.args.args)
            return names if names[:1] == ("name",) else _NEW_ORDER
    return _NEW_ORDER


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Mapping):  # functions={name: docstring}
        return tuple(str(k) for k in value)
    return tuple(str(v) for v in value)


def spec_from_kwargs(values: Mapping[str, Any]) -> ExtensionSpec:
    """Build a spec from load_inline keyword values (extra keys are ignored)."""
    if "name" not in values:
        raise ValueError("load_inline call without a name")
    return ExtensionSpec(
        name=str(values["name"]),
        **{k: _strings(values.get(k)) for k in SPEC_FIELDS if k != "name"},
    )


def spec_from_call(
    args: Sequence[Any], kwargs: Mapping[str, Any], order: Sequence[str] | None = None
) -> ExtensionSpec:
    """Normalise a load_inline call's positional and keyword arguments into a spec."""
    names = tuple(order) if order is not None else load_inline_parameter_order()
    values = dict(zip(names, args))
    values.update(kwargs)
    return spec_from_kwargs(values)


def is_load_inline_call(call: ast.Call) -> bool:
    """``load_inline(...)`` or ``<anything>.load_inline(...)`` (the name Kevin's format uses)."""
    func = call.func
    return (isinstance(func, ast.Name) and func.id == "load_inline") or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline"
    )


def bind_arguments(call: ast.Call, order: Sequence[str] | None = None) -> dict[str, ast.expr]:
    """Each argument expression of a load_inline call under its parameter name.

    Raises NotStatic for ``*args`` / ``**kwargs`` (which parameter they fill is unknowable)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise NotStatic("*args or **kwargs")
    names = tuple(order) if order is not None else load_inline_parameter_order()
    bound: dict[str, ast.expr] = dict(zip(names, call.args))
    bound.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    return bound


def _enclosing_functions(tree: ast.Module) -> dict[ast.Call, list[ast.AST]]:
    """Map each load_inline call to the function definitions enclosing it (outermost first)."""
    found: dict[ast.Call, list[ast.AST]] = {}

    def visit(node: ast.AST, stack: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and is_load_inline_call(child):
                found[child] = list(stack)
            inner = stack + [child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else stack
            visit(child, inner)

    visit(tree, [])
    return found


def extract_static(code: str) -> list[ExtensionSpec]:
    """Specs of every load_inline call, in source order. Raises NotStatic, SyntaxError or
    ConstantTooLarge (folding past its bounds)."""
    with PARSE_LOCK:  # threads must not parse at once (ast_lock)
        tree = ast.parse(code)
    module_env: dict[str, Any] = {}
    budget = Budget()
    bind_assignments(tree.body, module_env, budget)
    calls = sorted(_enclosing_functions(tree).items(), key=lambda item: (item[0].lineno, item[0].col_offset))
    specs = []
    for call, functions in calls:
        env = dict(module_env)
        for function in functions:
            bind_assignments(function.body, env, budget)  # type: ignore[attr-defined]
        evaluate = ConstEval(env, budget)
        values = {name: evaluate(expr) for name, expr in bind_arguments(call).items() if name in SPEC_FIELDS}
        try:
            specs.append(spec_from_kwargs(values))
        except (ValueError, TypeError) as exc:
            raise NotStatic(str(exc)) from exc
    return specs
