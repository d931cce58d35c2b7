"""The task package's entry points: module classes of a file, a task from a file or a buffer,
and the example-input stub."""

from __future__ import annotations

import os
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kevin_agent.data import Task, TaskOrigin
from kevin_agent.errors import UserInputError
from kevin_agent.task.assemble import build_task_source
from kevin_agent.task.modules import FileModules
from kevin_agent.task.parse import parse_file
from kevin_agent.task.stub import stub_for

__all__ = ["ModuleClass", "find_module_classes", "input_stub", "load_task", "task_from_source"]


@dataclass(frozen=True)
class ModuleClass:
    """An nn.Module subclass found in a file."""

    name: str
    start_line: int  # 1-based, the `class` line (decorators excluded)
    end_line: int
    has_inputs: bool  # example inputs found (static methods or module functions)
    missing_inputs: str | None  # one line saying exactly what to add and where, when not found
    used_by: tuple[str, ...] = ()  # module classes of the file that need this one (submodule)


def find_module_classes(source: str, path: str | None = None) -> list[ModuleClass]:
    """The file's nn.Module classes in file order; UserInputError on a syntax error.

    ``path`` only names the file in messages ("model.py:14"); without it they say "line 14".
    """
    return list(_module_classes(source, path))


@lru_cache(maxsize=32)
def _module_classes(source: str, path: str | None) -> tuple[ModuleClass, ...]:
    modules = FileModules(parse_file(source, path or "<source>"), path)
    found: list[ModuleClass] = []
    for name, index in modules.module_classes.items():
        statement = modules.statements[index]
        plan = modules.input_plan(name)
        found.append(
            ModuleClass(
                name=name,
                start_line=statement.line(modules.class_node(name).lineno),
                end_line=statement.end_line,
                has_inputs=plan.complete,
                missing_inputs=modules.missing_inputs_message(name, plan),
                used_by=modules.used_by.get(name, ()),
            )
        )
    return tuple(found)


def load_task(spec: str) -> Task:
    """Build the task for ``FILE.py::ClassName`` or ``FILE.py`` (one candidate module)."""
    path_text, separator, class_name = spec.partition("::")
    if separator and not class_name.strip():
        raise UserInputError(f"{spec}: name a class after '::', e.g. {path_text}::MyModule")
    path = Path(path_text)
    if not path.exists():
        raise UserInputError(f"{path_text}: no such file")
    if path.is_dir():
        raise UserInputError(_folder_message(path, path_text))
    if path.suffix != ".py":
        raise UserInputError(f"{path_text}: not a .py file (give FILE.py or FILE.py::ClassName)")
    try:
        with tokenize.open(path) as handle:
            source = handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path_text}: cannot read it as Python source: {err}") from None
    return _build(source, path_text, os.path.abspath(path), class_name.strip() or None)


def _folder_message(folder: Path, text: str) -> str:
    """A folder was given as a task: say so, and what to give instead (a file of it, for example)."""
    files = sorted(p.name for p in folder.glob("*.py") if p.is_file() and not p.name.startswith("test_"))
    example = f"{text.rstrip('/')}/{files[0]}::ClassName" if files else "FILE.py::ClassName"
    return (f"{text}: is a folder, not a Python file: give the module's file and class, e.g. "
            f"{example} (`kevin tui {text}` lists the nn.Module classes under a folder)")


def task_from_source(source: str, path: str, class_name: str | None) -> Task:
    """Build the task from source text (e.g. an editor's unsaved buffer) named ``path``."""
    return _build(source, path, path, class_name)


def input_stub(source: str, class_name: str) -> tuple[int, str]:
    """(0-based line to insert at, text) adding example-input stubs at the end of the class."""
    modules = FileModules(parse_file(source), None)
    _require_module_class(modules, "<source>", class_name)
    return stub_for(modules, class_name)


def _build(source: str, path: str, origin_path: str, class_name: str | None) -> Task:
    modules = FileModules(parse_file(source, path), path)
    name = _select_class(modules, path) if class_name is None else class_name
    _require_module_class(modules, path, name)
    plan = modules.input_plan(name)
    missing = modules.missing_inputs_message(name, plan)
    if missing:
        raise UserInputError(missing)
    statement = modules.statements[modules.classes[name]]
    origin = TaskOrigin(
        path=origin_path,
        class_name=name,
        start_line=statement.line(modules.class_node(name).lineno),
        end_line=statement.end_line,
    )
    return Task(
        source=build_task_source(modules, name, plan),
        class_name=name,
        origin=origin,
        inputs_from="static methods" if plan.get_inputs == "static" else "module functions",
    )


def _select_class(modules: FileModules, path: str) -> str:
    if not modules.module_classes:
        raise UserInputError(f"{path} defines no nn.Module subclass (a class with nn.Module as a base)")
    candidates = modules.candidates or list(modules.module_classes)
    if len(candidates) > 1:
        raise UserInputError(
            f"{path} holds several modules ({', '.join(candidates)}): "
            f"pick one as {path}::{candidates[0]}"
        )
    return candidates[0]


def _require_module_class(modules: FileModules, path: str, name: str) -> None:
    listing = ", ".join(modules.module_classes) or "none"
    if name not in modules.classes:
        raise UserInputError(f"{path} has no class {name}; its nn.Module classes: {listing}")
    if name not in modules.module_classes:
        raise UserInputError(
            f"{modules.location(name) if modules.path else path}: class {name} is not an "
            f"nn.Module subclass (give it nn.Module as a base); its nn.Module classes: {listing}"
        )
