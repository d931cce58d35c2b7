"""Compare the constructor and forward signatures of the candidate and the user's class."""

from __future__ import annotations

import ast
from typing import Optional

from kevin_agent.errors import UserInputError

_TORCH_BASES = {"Module", "nn.Module", "torch.nn.Module"}


def find_class(tree: ast.Module, name: str) -> Optional[ast.ClassDef]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method(cls: ast.ClassDef, name: str) -> Optional[ast.FunctionDef]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _inherits_plain_module(cls: ast.ClassDef) -> bool:
    return all(ast.unparse(base) in _TORCH_BASES for base in cls.bases)


def describe(func: ast.FunctionDef) -> str:
    """``(a, b=..., *args, c, **kw)``: names, kinds and which have defaults, without ``self``."""
    args = func.args
    positional = [*args.posonlyargs, *args.args][1:]
    first_default = len(positional) - len(args.defaults)
    parts = [a.arg + ("=..." if i >= first_default else "") for i, a in enumerate(positional)]
    if args.posonlyargs and len(args.posonlyargs) > 1:
        parts.insert(len(args.posonlyargs) - 1, "/")
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        parts.append(arg.arg + ("=..." if default is not None else ""))
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return "(" + ", ".join(parts) + ")"


def _signature(cls: ast.ClassDef, method: str) -> Optional[str]:
    """The method's signature; ``()`` for an inherited nn.Module __init__; None when unknowable."""
    func = _method(cls, method)
    if func is not None:
        return describe(func)
    if method == "__init__" and _inherits_plain_module(cls):
        return "()"
    return None


def check_signatures(original: ast.ClassDef, candidate: ast.ClassDef) -> None:
    """Raise UserInputError when __init__ or forward differ (names, kinds, defaults present)."""
    for method in ("__init__", "forward"):
        theirs, ours = _signature(original, method), _signature(candidate, method)
        if theirs is None or ours is None:
            continue
        if theirs != ours:
            raise UserInputError(
                f"the candidate's {method}{ours} differs from {original.name}.{method}{theirs}: "
                f"it is not a drop-in replacement, so it cannot be accepted"
            )
