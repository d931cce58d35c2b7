"""Constant folding of candidate source: the values of expressions built only from literals and
names bound to literals (``+``, ``%``, ``*``, f-strings, ``.format``, ``.join``, lists, dicts).

Used wherever a load_inline argument is read without running the candidate: the build, the
static checks and accept, all in kevin's own process. So every operation is bounded before it runs
(``ConstantTooLarge``): no string, list or integer beyond ``MAX_VALUE`` characters or items or
``MAX_INT_BITS`` bits, no format width beyond ``MAX_FORMAT_WIDTH``, and at most ``MAX_TOTAL``
characters made in all by one ``Budget`` (one candidate). Standard library only.
"""

from __future__ import annotations

import ast
import re
import string
from typing import Any, Optional

MAX_SOURCE_BYTES = 1_000_000  # a candidate file (the static stage refuses a larger one)
MAX_VALUE = 4_000_000  # characters of one folded string (items of a list): 4x the source limit
MAX_INT_BITS = 4096
MAX_FORMAT_WIDTH = 10_000
MAX_TOTAL = 64_000_000  # characters (items) made by all operations of one candidate
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class NotStatic(Exception):
    """An argument could not be evaluated without running the candidate."""


class ConstantTooLarge(Exception):
    """A constant expression would exceed the folding bounds (the message is for the model)."""

    def __init__(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", None)
        super().__init__(f"{'line ' + str(line) + ': ' if line else ''}a constant expression {what}; "
                         "build large sources from smaller parts, under 1 MB in all")
        self.line = line


class Budget:
    """What one candidate's folding may make in all (shared by every ConstEval of it)."""

    def __init__(self, total: int = MAX_TOTAL) -> None:
        self.left = total

    def spend(self, node: ast.AST, size: int) -> None:
        if size > MAX_VALUE:
            raise ConstantTooLarge(node, f"would be {size:,} characters or items long (the limit is {MAX_VALUE:,})")
        self.left -= size
        if self.left < 0:
            raise ConstantTooLarge(node, f"goes past {MAX_TOTAL:,} characters folded in all")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _printed_size(value: Any) -> int:
    """At most how many characters ``value`` prints as (integers are bounded by MAX_INT_BITS)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int):
        return abs(value).bit_length() // 3 + 2
    return 400  # a float, and anything else format accepts here


def _check_widths(node: ast.AST, widths: list[str]) -> None:
    for width in widths:
        if width == "*":
            raise NotStatic("computed format width")
        if width and int(width) > MAX_FORMAT_WIDTH:
            raise ConstantTooLarge(node, f"formats a field {width} wide (the limit is {MAX_FORMAT_WIDTH:,})")


class ConstEval:
    """Evaluates expressions built only from constants and names bound to constants."""

    def __init__(self, env: dict[str, Any], budget: Optional[Budget] = None) -> None:
        self.env = env
        self.used: set[str] = set()  # names whose bound values were read
        self.budget = budget or Budget()

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
        return {self(k): self(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self(node.left), self(node.right)
        if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list, tuple, int)):
            self._check(node, _size(left) + _size(right), [left, right], adds=True)
            return left + right
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            fields = list(_PERCENT_SPEC.finditer(left))
            widths = [w for m in fields for w in m.groups()]
            _check_widths(node, widths)
            values = list(right.values()) if isinstance(right, dict) else right if isinstance(right, tuple) else [right]
            self._spend_format(node, left, len(fields), widths, values)
            return left % right
        if isinstance(node.op, ast.Mult) and isinstance(left, (str, list, int)) and isinstance(right, int):
            if isinstance(left, int) and not isinstance(left, bool):
                self._check(node, 0, [left, right])
                return left * right
            self.budget.spend(node, _size(left) * max(0, right))
            return left * right
        raise NotStatic("operator")

    def _check(self, node: ast.AST, size: int, operands: list[Any], adds: bool = False) -> None:
        """Before an operation: its result's ``size``, and its integers' bits (a sum has at most
        one bit more than its largest operand, a product the operands' bits together)."""
        bits = [abs(v).bit_length() for v in operands if isinstance(v, int) and not isinstance(v, bool)]
        if bits and (max(bits) + 1 if adds else sum(bits)) > MAX_INT_BITS:
            raise ConstantTooLarge(node, f"makes an integer over {MAX_INT_BITS} bits")
        self.budget.spend(node, size)

    def _spend_format(self, node: ast.AST, text: str, fields: int, widths: list[str], values: Any) -> None:
        """Before formatting: at most the text plus, per field, the widest value and width."""
        widest = max((_printed_size(v) for v in values), default=0) if isinstance(values, (list, tuple)) else 0
        width = max((int(w) for w in widths if w and w.isdigit()), default=0)
        self.budget.spend(node, len(text) + fields * (widest + width))

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
        self.budget.spend(node, sum(map(len, parts)))
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
            parts = args[0] if isinstance(args[0], (list, tuple)) else ()
            self.budget.spend(node, sum(map(_size, parts)) + len(base) * max(0, len(parts) - 1))
            return base.join(args[0])
        kwargs = {k.arg: self(k.value) for k in node.keywords if k.arg}
        if func.attr == "format" and all(isinstance(v, (str, int, float)) for v in [*args, *kwargs.values()]):
            specs = [spec or "" for _, _, spec, _ in string.Formatter().parse(base)]
            if any("{" in spec for spec in specs):
                raise NotStatic("nested format field")
            widths = [w for spec in specs for w in re.findall(r"\d+", spec)]
            _check_widths(node, widths)
            self._spend_format(node, base, len(specs), widths, [*args, *kwargs.values()])
            return base.format(*args, **kwargs)
        raise NotStatic("format arguments")


def bind_assignments(body: list[ast.stmt], env: dict[str, Any], budget: Optional[Budget] = None) -> None:
    """Record simple ``NAME = <constant expression>`` bindings of a block, in order (ConstantTooLarge
    past the bounds)."""
    evaluate = ConstEval(env, budget)
    for stmt in body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            targets = [stmt.target]
            value = ast.copy_location(ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op,
                                                 right=stmt.value), stmt)
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    env[target.id] = evaluate(value)  # type: ignore[arg-type]  # an expr
                except (NotStatic, TypeError, ValueError, KeyError, IndexError):
                    env.pop(target.id, None)  # rebinding to something dynamic hides the old value
