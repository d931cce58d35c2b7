"""Assemble a task's self-contained source from the statements a class needs.

The kept top-level statements are copied as text in their original order (comments and layout
survive), the selected class is renamed ``Model`` (its self-references too), imports are trimmed to
the names used, and module-level ``get_inputs()`` / ``get_init_inputs()`` are added when they come
from static methods or are generated.
"""

from __future__ import annotations

import ast
import copy
import re

from kevin_agent.task.modules import FileModules, InputPlan
from kevin_agent.task.parse import TopStatement

TASK_CLASS = "Model"


def build_task_source(modules: FileModules, name: str, plan: InputPlan) -> str:
    """KernelBench-shaped source: the kept statements, ``class Model``, the input functions."""
    statements = modules.statements
    class_index = modules.classes[name]
    roots = [class_index]
    for function in ("get_inputs", "get_init_inputs"):
        if getattr(plan, function) == "module":
            roots.extend(modules.binders[function])
    kept = modules.closure(roots, {name: class_index})
    kept |= {i for i, s in enumerate(statements) if _is_future_import(s.node)}
    order = sorted(kept)
    used = frozenset().union(*(modules.uses(i) for i in order))
    generated = _generated_functions(plan)
    renames = _renames(modules, name, order, class_index, generated)

    parts: list[str] = []
    previous: int | None = None
    for index in order:
        if previous is not None:
            parts.append(_gap(modules, previous, index))
        elif index > 0:
            parts.append(_leading_comments(modules, index))
        parts.append(_statement_text(modules, index, renames, used))
        previous = index
    body = "".join(parts).rstrip("\n")
    for function_text in generated.values():
        body += "\n\n\n" + function_text
    return body.lstrip("\n") + "\n"


def _generated_functions(plan: InputPlan) -> dict[str, str]:
    functions: dict[str, str] = {}
    for function in ("get_inputs", "get_init_inputs"):
        kind = getattr(plan, function)
        if kind == "static":
            functions[function] = f"def {function}():\n    return {TASK_CLASS}.{function}()"
        elif kind == "generated":
            functions[function] = f"def {function}():\n    return []"
    return functions


def _renames(
    modules: FileModules, name: str, order: list[int], class_index: int, generated: dict[str, str]
) -> dict[str, str]:
    """Old name -> new name: the class becomes Model; kept names that would clash move aside."""
    renames = {name: TASK_CLASS} if name != TASK_CLASS else {}
    bound = set().union(*(modules.statements[i].binds for i in order if i != class_index))
    taken = bound | set(modules.binders)
    clashes = [n for n in (TASK_CLASS, *generated) if n in bound and n != name]
    for clash in clashes:
        fresh, number = f"{clash}_", 1
        while fresh in taken:
            number += 1
            fresh = f"{clash}_{number}"
        taken.add(fresh)
        renames[clash] = fresh
    return renames


def _is_future_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def _is_definition(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def _gap(modules: FileModules, previous: int, index: int) -> str:
    """What separates two kept statements: the original lines when nothing was dropped between."""
    before, after = modules.statements[previous], modules.statements[index]
    if index == previous + 1 and after.start_line > before.end_line:
        between = modules.parsed.lines[before.end_line : after.start_line - 1]
        return "\n" + "".join(line + "\n" for line in between)
    if after.start_line == before.end_line:
        return "\n"
    blank = "\n\n" if _is_definition(before.node) or _is_definition(after.node) else "\n"
    return "\n" + blank + _leading_comments(modules, index)


def _leading_comments(modules: FileModules, index: int) -> str:
    """Comment lines directly above a statement (no blank line between)."""
    statement = modules.statements[index]
    floor = modules.statements[index - 1].end_line if index > 0 else 0
    lines = modules.parsed.lines
    first = statement.start_line - 1  # 0-based index of the statement's first line
    while first - 1 >= floor and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return "".join(line + "\n" for line in lines[first : statement.start_line - 1])


def _shares_line(modules: FileModules, index: int) -> bool:
    statements = modules.statements
    statement = statements[index]
    before = index > 0 and statements[index - 1].end_line == statement.start_line
    after = index + 1 < len(statements) and statements[index + 1].start_line == statement.end_line
    return before or after


def _statement_text(
    modules: FileModules, index: int, renames: dict[str, str], used: frozenset[str]
) -> str:
    statement = modules.statements[index]
    node = statement.node
    trimmed = _trim_import(node, used)
    if trimmed is not None:
        return ast.unparse(trimmed)
    if _shares_line(modules, index):
        return ast.unparse(_RenameNames(renames).visit(copy.deepcopy(node)))
    text_lines = modules.parsed.lines[statement.start_line - 1 : statement.end_line]
    for line_number, start, end, new in sorted(
        _rename_spans(statement, renames, modules.parsed.lines), reverse=True
    ):
        offset = line_number - statement.start_line
        text_lines[offset] = _replace_bytes(text_lines[offset], start, end, new)
    return "\n".join(text_lines)


def _trim_import(node: ast.stmt, used: frozenset[str]) -> ast.stmt | None:
    """An import keeping only the names used, or None when it is kept whole."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)) or _is_future_import(node):
        return None
    if any(alias.name == "*" for alias in node.names):
        return None

    def bound(alias: ast.alias) -> str:
        if isinstance(node, ast.Import) and not alias.asname:
            return alias.name.split(".")[0]
        return alias.asname or alias.name

    keep = [alias for alias in node.names if bound(alias) in used]
    if len(keep) == len(node.names) or not keep:
        return None
    trimmed = copy.copy(node)
    trimmed.names = keep
    return trimmed


def _rename_spans(
    statement: TopStatement, renames: dict[str, str], lines: list[str]
) -> list[tuple[int, int, int, str]]:
    """(file line, start byte, end byte, new text) for each name to rename in a statement."""
    if not renames:
        return []
    spans: list[tuple[int, int, int, str]] = []
    for node in ast.walk(statement.node):
        if isinstance(node, ast.Name) and node.id in renames and node.end_col_offset is not None:
            line = statement.line(node.lineno)
            spans.append((line, node.col_offset, node.end_col_offset, renames[node.id]))
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in renames:
                line = statement.line(node.lineno)
                text = lines[line - 1].encode("utf-8")
                match = re.search(rb"\b(?:class|def)\s+(" + re.escape(node.name.encode()) + rb")\b", text)
                if match:
                    spans.append((line, match.start(1), match.end(1), renames[node.name]))
    return spans


def _replace_bytes(line: str, start: int, end: int, new: str) -> str:
    raw = line.encode("utf-8")
    return (raw[:start] + new.encode("utf-8") + raw[end:]).decode("utf-8")


class _RenameNames(ast.NodeTransformer):
    def __init__(self, renames: dict[str, str]) -> None:
        self.renames = renames

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.renames.get(node.id, node.id)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.name = self.renames.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef  # type: ignore[assignment]  # one visitor for all
