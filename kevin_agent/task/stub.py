"""Example-input stubs for a module class (the editor's quick fix for "no example inputs").

The stub goes at the end of the class body, indented like it, and is filled from the signatures:
one ``torch.randn(...)`` per tensor argument of ``forward`` (sizes are placeholders marked
``# TODO: real shape``) and one value per ``__init__`` argument (its default, or a placeholder).
"""

from __future__ import annotations

import ast

from kevin_agent.errors import UserInputError
from kevin_agent.task.modules import FileModules

_PLACEHOLDER_SHAPE = "16, 64"
_SCALARS = {"int": "64", "float": "1.0", "bool": "False", "str": '""'}


def stub_for(modules: FileModules, name: str) -> tuple[int, str]:
    """(0-based line to insert at, text) adding the missing input methods to class ``name``."""
    plan = modules.input_plan(name)
    if plan.complete:
        raise UserInputError(f"{name} already has example inputs")
    statement = modules.statements[modules.classes[name]]
    node = modules.class_node(name)
    first = node.body[0]
    if statement.line(first.lineno) == statement.line(node.lineno):
        raise UserInputError(
            f"{modules.location(name)}: put the body of class {name} on its own lines first"
        )
    lines = modules.parsed.lines
    body_line = lines[statement.line(first.lineno) - 1]
    indent = body_line[: len(body_line) - len(body_line.lstrip())]
    class_line = lines[statement.line(node.lineno) - 1]
    class_indent = class_line[: len(class_line) - len(class_line.lstrip())]
    unit = indent[len(class_indent) :] or "    "

    needs_torch_import = "torch" not in modules.binders
    blocks: list[list[str]] = []
    if plan.get_inputs is None:
        blocks.append(_inputs_block(modules, name, needs_torch_import))
    if plan.get_init_inputs is None:
        blocks.append(_init_block(modules, name))
    text = ""
    for block in blocks:
        text += "\n" + "".join(_indent_line(line, indent, unit) for line in block)
    return statement.end_line, text


def _indent_line(line: str, indent: str, unit: str) -> str:
    depth = len(line) - len(line.lstrip(" ")) if line.startswith(" ") else 0
    return indent + unit * (depth // 4) + line.lstrip(" ") + "\n"


def _inputs_block(modules: FileModules, name: str, import_torch: bool) -> list[str]:
    entries: list[str] = []
    forward = modules.find_method(name, "forward")
    if forward is not None:
        positional = [*forward.args.posonlyargs, *forward.args.args][1:]
        required = positional[: len(positional) - len(forward.args.defaults)]
        for arg in required:
            entries.append(_value_for(arg, f"torch.randn({_PLACEHOLDER_SHAPE})", "shape"))
        if not required and forward.args.vararg is not None:
            entries.append(f"torch.randn({_PLACEHOLDER_SHAPE}),  # TODO: real shape")
    else:
        entries.append(f"torch.randn({_PLACEHOLDER_SHAPE}),  # TODO: real shape")
    head = ["@staticmethod", "def get_inputs():"]
    if import_torch:
        head.append("    import torch")
    return [*head, *_list_lines(entries)]


def _init_block(modules: FileModules, name: str) -> list[str]:
    entries: list[str] = []
    init = modules.find_method(name, "__init__")
    if init is not None:
        positional = [*init.args.posonlyargs, *init.args.args][1:]
        defaults = [None] * (len(positional) - len(init.args.defaults)) + list(init.args.defaults)
        for arg, default in zip(positional, defaults):
            if default is not None:
                entries.append(f"{ast.unparse(default)},  # {arg.arg} (its default)")
            else:
                entries.append(_value_for(arg, "64", "value"))
        for arg, default in zip(init.args.kwonlyargs, init.args.kw_defaults):
            if default is None:
                entries.append(f"# TODO: keyword-only {arg.arg} cannot be passed here; give it a default")
    else:
        entries.append("# TODO: the constructor arguments of the base class")
    return ["@staticmethod", "def get_init_inputs():", *_list_lines(entries)]


def _value_for(arg: ast.arg, fallback: str, what: str) -> str:
    annotation = arg.annotation
    kind = annotation.id if isinstance(annotation, ast.Name) else None
    value = _SCALARS.get(kind or "", fallback)
    return f"{value},  # TODO: real {what if value == fallback else 'value'} of {arg.arg}"


def _list_lines(entries: list[str]) -> list[str]:
    if not entries:
        return ["    return []"]
    return ["    return [", *(f"        {entry}" for entry in entries), "    ]"]
