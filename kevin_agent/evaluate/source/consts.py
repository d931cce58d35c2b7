"""Constant folding of candidate source: the values of expressions built only from literals and
names bound to literals (``+``, ``%``, ``*``, f-strings, ``.format``, ``.join``, lists, dicts).

Used wherever a load_inline argument is read without running the candidate: the build, the
static checks and accept. Standard library only.
"""

from __future__ import annotations

import ast
from typing import Any


class NotStatic(Exception):
    """An argument could not be evaluated without running the candidate."""


class ConstEval:
    """Evaluates expressions built only from constants and names bound to constants."""

    def __init__(self, env: dict[str, Any]) -> None:
        self.env = env
        self.used: set[str] = set()  # names whose bound values were read

    def __call__(self, node: ast.AST) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise NotStatic(type(node).__name__)
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            self.used.add(node.id)
            return self.env[node.id]
        raise NotStatic(node.id)

    def _List(self, node: ast.List) -> Any:
        return [self(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self(e) for e in node.elts)

    def _Dict(self, node: ast.Dict) -> Any:
        if any(k is None for k in node.keys):
            raise NotStatic("dict unpacking")
        return {self(k): self(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]  # no None keys

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self(node.left), self(node.right)
        if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list, tuple, int)):
            return left + right
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            return left % right
        if isinstance(node.op, ast.Mult) and isinstance(left, (str, list, int)) and isinstance(right, int):
            return left * right
        raise NotStatic("operator")

    def _JoinedStr(self, node: ast.JoinedStr) -> Any:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and value.format_spec is None and value.conversion == -1:
                inner = self(value.value)
                if not isinstance(inner, (str, int)):
                    raise NotStatic("f-string value")
                parts.append(str(inner))
            else:
                raise NotStatic("f-string format")
        return "".join(parts)

    def _Call(self, node: ast.Call) -> Any:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("format", "join"):
            raise NotStatic("call")
        base = self(func.value)
        if not isinstance(base, str):
            raise NotStatic("call on non-string")
        args = [self(a) for a in node.args]
        if func.attr == "join" and len(args) == 1 and not node.keywords:
            return base.join(args[0])
        kwargs = {k.arg: self(k.value) for k in node.keywords if k.arg}
        if func.attr == "format" and all(isinstance(v, (str, int, float)) for v in [*args, *kwargs.values()]):
            return base.format(*args, **kwargs)
        raise NotStatic("format arguments")


def bind_assignments(body: list[ast.stmt], env: dict[str, Any]) -> None:
    """Record simple ``NAME = <constant expression>`` bindings of a block, in order."""
    evaluate = ConstEval(env)
    for stmt in body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            targets = [stmt.target]
            value = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    env[target.id] = evaluate(value)  # type: ignore[arg-type]  # an expr
                except (NotStatic, TypeError, ValueError, KeyError, IndexError):
                    env.pop(target.id, None)  # rebinding to something dynamic hides the old value
