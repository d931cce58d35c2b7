"""Name analysis for top-level statements: what each binds, which module-level names it reads.

Pure ``ast``: nothing is executed. Scopes follow Python's rules closely enough to decide which
top-level statements a class needs: a function's parameters and assigned names are local, class
bodies do not leak into their methods, comprehensions bind their own targets. Annotations are
reported apart because ``from __future__ import annotations`` makes them lazy strings.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class StatementNames:
    """The module-level names one top-level statement binds and reads."""

    binds: frozenset[str]
    uses: frozenset[str]  # read outside annotations
    annotation_uses: frozenset[str]  # read only inside annotations
    star_import: bool = False


class _Scope(ast.NodeVisitor):
    """Collects loads and stores of one scope; nested scopes are analysed recursively."""

    def __init__(self) -> None:
        self.loads: set[str] = set()
        self.annotation_loads: set[str] = set()
        self.stores: set[str] = set()
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()
        self.nested_free: set[str] = set()
        self.nested_annotation_free: set[str] = set()
        self.star_import = False
        self._in_annotation = False

    # --- results -------------------------------------------------------------------------
    def locals(self) -> set[str]:
        return self.stores - self.declared_global - self.declared_nonlocal

    def function_free(self) -> tuple[set[str], set[str]]:
        """Free names of a function or comprehension scope: (uses, annotation uses)."""
        local = self.locals()
        free = (self.loads | self.nested_free) - local
        free |= self.declared_global & (self.loads | self.stores)
        annotation_free = (self.annotation_loads | self.nested_annotation_free) - local
        return free, annotation_free

    def class_free(self) -> tuple[set[str], set[str]]:
        """Free names of a class body: its own names shadow only the body, not its methods."""
        local = self.locals()
        free = (self.loads - local) | self.nested_free
        annotation_free = (self.annotation_loads - local) | self.nested_annotation_free
        return free, annotation_free

    # --- helpers -------------------------------------------------------------------------
    def _annotation(self, node: ast.AST | None) -> None:
        if node is None:
            return
        saved, self._in_annotation = self._in_annotation, True
        self.visit(node)
        self._in_annotation = saved

    def _merge_nested(self, free: tuple[set[str], set[str]]) -> None:
        self.nested_free |= free[0]
        self.nested_annotation_free |= free[1]

    def _arguments(self, args: ast.arguments) -> None:
        """Defaults and annotations are evaluated in the enclosing scope."""
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)
        for arg in _all_args(args):
            self._annotation(arg.annotation)

    # --- visitors ------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            (self.annotation_loads if self._in_annotation else self.loads).add(node.id)
        else:
            self.stores.add(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._arguments(node.args)
        self._annotation(node.returns)
        self.stores.add(node.name)
        inner = _Scope()
        inner.stores |= {arg.arg for arg in _all_args(node.args)}
        for stmt in node.body:
            inner.visit(stmt)
        self._merge_nested(inner.function_free())

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._arguments(node.args)
        inner = _Scope()
        inner.stores |= {arg.arg for arg in _all_args(node.args)}
        inner.visit(node.body)
        self._merge_nested(inner.function_free())

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self.stores.add(node.name)
        inner = _Scope()
        for stmt in node.body:
            inner.visit(stmt)
        self._merge_nested(inner.class_free())

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        inner = _Scope()
        for generator in node.generators:
            inner.visit(generator.target)
            inner.visit(generator.iter)
            for condition in generator.ifs:
                inner.visit(condition)
        if isinstance(node, ast.DictComp):
            inner.visit(node.key)
            inner.visit(node.value)
        else:
            inner.visit(node.elt)
        self._merge_nested(inner.function_free())

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.stores.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.star_import = True
            else:
                self.stores.add(alias.asname or alias.name)

    def visit_Global(self, node: ast.Global) -> None:
        self.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.declared_nonlocal.update(node.names)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.stores.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.AST) -> None:
        name = getattr(node, "name", None)
        if name:
            self.stores.add(name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.AST) -> None:
        self.visit_MatchAs(node)

    def visit_MatchMapping(self, node: ast.AST) -> None:
        rest = getattr(node, "rest", None)
        if rest:
            self.stores.add(rest)
        self.generic_visit(node)


def _all_args(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def statement_names(stmt: ast.stmt) -> StatementNames:
    """Names a top-level statement binds at module level and module-level names it reads."""
    scope = _Scope()
    scope.visit(stmt)
    uses = scope.loads | scope.nested_free | scope.declared_global
    return StatementNames(
        binds=frozenset(scope.stores),
        uses=frozenset(uses),
        annotation_uses=frozenset(scope.annotation_loads | scope.nested_annotation_free),
        star_import=scope.star_import,
    )


def import_aliases(stmt: ast.stmt) -> dict[str, str]:
    """For an import statement: bound name -> dotted name it stands for."""
    aliases: dict[str, str] = {}
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                aliases[head] = head
    elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
        for alias in stmt.names:
            if alias.name != "*":
                aliases[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
    return aliases


def dotted_name(expr: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, None for anything else."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
               ast.SetComp, ast.GeneratorExp, ast.DictComp)


def top_level_binds(stmt: ast.stmt) -> tuple[frozenset[str], bool]:
    """Names a top-level statement binds at module level, and whether it is a star import.

    Cheaper than ``statement_names``: it does not look inside function or class bodies.
    """
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return frozenset([stmt.name]), False
    names: set[str] = set()
    star = False
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, _NEW_SCOPES):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            star = star or any(alias.name == "*" for alias in node.names)
            names.update(n for n in import_aliases_bound(node))
            continue
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        name = getattr(node, "name", None) if not isinstance(node, ast.alias) else None
        if isinstance(name, str) and not isinstance(node, ast.expr):
            names.add(name)  # except handlers, match captures
        rest = getattr(node, "rest", None)
        if isinstance(rest, str):
            names.add(rest)
        stack.extend(ast.iter_child_nodes(node))
    return frozenset(names), star


def import_aliases_bound(stmt: ast.Import | ast.ImportFrom) -> list[str]:
    """Names an import statement binds (``import a.b`` binds ``a``)."""
    if isinstance(stmt, ast.Import):
        return [alias.asname or alias.name.split(".")[0] for alias in stmt.names]
    return [alias.asname or alias.name for alias in stmt.names if alias.name != "*"]


def mutated_roots(stmt: ast.stmt) -> frozenset[str]:
    """Names a top-level statement changes in place: ``X[k] = v``, ``X.a += 1``, ``X.append(v)``."""
    if isinstance(stmt, ast.Assign):
        targets: list[ast.expr] = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Delete):
        targets = list(stmt.targets)
    elif (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
    ):
        targets = [stmt.value.func]
    else:
        return frozenset()
    roots: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
            continue
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            continue
        node: ast.expr = target
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Name):
            roots.add(node.id)
    return frozenset(roots)
