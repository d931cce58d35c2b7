"""Which classes of a file are nn.Modules, which statements they need, where their inputs are.

Rules (documented in docs/tasks.md):
- A class is an nn.Module when a base is ``torch.nn.Module`` (``nn.Module``, ``torch.nn.Module``,
  ``Module`` imported from torch.nn, any alias of these), another ``torch.nn`` module class such as
  ``nn.Sequential``, or another class of the file that is an nn.Module (transitively).
- A module class is a *submodule* when another module class of the file needs it (directly or
  through helpers it uses); the others are the file's *candidates*.
- Example inputs, each of ``get_inputs`` / ``get_init_inputs`` on its own, in this order: a static
  (or class) method on the class or a base class of the file; module-level functions, only when the
  class is the file's single candidate; for ``get_init_inputs`` only, ``[]`` when ``__init__`` needs
  no arguments.
- A folder browsed for modules offers tasks only (``is_task_folder``, ``is_task_file``,
  ``offered_classes``): not tests, fixtures, environments or answer files (a ``ModelNew`` class).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kevin_agent.task.names import dotted_name, import_aliases, mutated_roots
from kevin_agent.task.parse import ParsedFile, TopStatement

_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__builtins__"}
_NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
_STATIC = frozenset({"staticmethod", "classmethod"})


@dataclass(frozen=True)
class InputPlan:
    """Where a class's example inputs come from: "static", "module", "generated" or None."""

    get_inputs: str | None
    get_init_inputs: str | None
    init_params: tuple[str, ...] | None  # __init__ arguments without defaults; None if unknown

    @property
    def complete(self) -> bool:
        return self.get_inputs is not None and self.get_init_inputs is not None


class FileModules:
    """The nn.Module classes of a parsed file and the statements they depend on."""

    def __init__(self, parsed: ParsedFile, path: str | None) -> None:
        self.parsed = parsed
        self.path = path
        self.statements: list[TopStatement] = parsed.statements
        self.binders: dict[str, list[int]] = {}
        self.star_imports: list[int] = []
        self.classes: dict[str, int] = {}
        aliases: dict[str, str] = {}
        for index, statement in enumerate(self.statements):
            for name in statement.binds:
                self.binders.setdefault(name, []).append(index)
            if statement.star_import:
                self.star_imports.append(index)
            if isinstance(statement.node, ast.ClassDef):
                self.classes[statement.node.name] = index
            aliases.update(import_aliases(statement.node))
        self.aliases = aliases
        self._add_mutations()
        self.module_classes: dict[str, int] = self._find_module_classes()
        self._uses: dict[int, frozenset[str]] = {}
        self._imports = {
            i for i, st in enumerate(self.statements) if isinstance(st.node, (ast.Import, ast.ImportFrom))
        }

    def _add_mutations(self) -> None:
        """``X.append(v)`` or ``X[k] = v`` at top level counts as binding X, unless X is a module."""
        imported: set[str] = set()
        other: set[str] = set()
        for statement in self.statements:
            is_import = isinstance(statement.node, (ast.Import, ast.ImportFrom))
            (imported if is_import else other).update(statement.binds)
        for index, statement in enumerate(self.statements):
            if statement.main_guard:
                continue
            for root in mutated_roots(statement.node):
                if root in other and root not in imported and index not in self.binders[root]:
                    self.binders[root].append(index)

    # --- nn.Module detection ---------------------------------------------------------------
    def class_node(self, name: str) -> ast.ClassDef:
        node = self.statements[self.classes[name]].node
        assert isinstance(node, ast.ClassDef)
        return node

    def torch_base(self, base: ast.expr) -> str | None:
        """"module" for torch.nn.Module, "layer" for another torch.nn module class, else None."""
        dotted = dotted_name(base)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            head = self.aliases[head]
        elif head == "nn":
            head = "torch.nn"
        resolved = f"{head}.{rest}" if rest else head
        if resolved in _MODULE_BASES:
            return "module"
        parts = resolved.split(".")
        last = parts[-1]
        if parts[:2] == ["torch", "nn"] and len(parts) in (3, 5) and last[:1].isupper():
            return None if last in _NOT_MODULES else "layer"
        return None

    def file_bases(self, name: str) -> list[str]:
        """Bases of class ``name`` that are classes of this file."""
        return [
            base.id
            for base in self.class_node(name).bases
            if isinstance(base, ast.Name) and base.id in self.classes and base.id != name
        ]

    def _find_module_classes(self) -> dict[str, int]:
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name in self.classes:
                if name in found:
                    continue
                node = self.class_node(name)
                if any(self.torch_base(b) for b in node.bases) or any(
                    b in found for b in self.file_bases(name)
                ):
                    found.add(name)
                    changed = True
        ordered = sorted(found, key=lambda n: self.classes[n])
        return {name: self.classes[name] for name in ordered}

    # --- dependencies ----------------------------------------------------------------------
    def uses(self, index: int) -> frozenset[str]:
        """Module-level names statement ``index`` reads (annotations too, unless they are lazy)."""
        cached = self._uses.get(index)
        if cached is None:
            names = self.statements[index].names
            cached = names.uses if self.parsed.future_annotations else names.uses | names.annotation_uses
            self._uses[index] = cached
        return cached

    def closure(self, roots: Iterable[int], pinned: dict[str, int] | None = None) -> set[int]:
        """Indices of the statements ``roots`` need, transitively (roots included)."""
        pinned = pinned or {}
        kept = set(roots)
        queue = list(kept)
        seen: set[str] = set()
        while queue:
            for name in self.uses(queue.pop()):
                if name in seen:
                    continue
                seen.add(name)
                if name in pinned:
                    targets = [pinned[name]]
                elif name in self.binders:
                    targets = self.binders[name]
                elif name not in _BUILTINS:
                    targets = self.star_imports
                else:
                    targets = []
                for target in targets:
                    if target not in kept:
                        kept.add(target)
                        if target not in self._imports:  # imports read no names
                            queue.append(target)
        return kept

    def needed_modules(self, name: str) -> set[str]:
        """Other module classes that class ``name`` needs."""
        index = self.module_classes[name]
        reached = self.closure([index], {name: index})
        by_index = self._module_by_index
        return {by_index[i] for i in reached if i in by_index and by_index[i] != name}

    @cached_property
    def _module_by_index(self) -> dict[int, str]:
        return {index: name for name, index in self.module_classes.items()}

    @cached_property
    def used_by(self) -> dict[str, tuple[str, ...]]:
        """Module class -> the module classes of the file that need it."""
        users: dict[str, list[str]] = {name: [] for name in self.module_classes}
        for name in self.module_classes:
            for needed in self.needed_modules(name):
                users[needed].append(name)
        return {name: tuple(found) for name, found in users.items()}

    @cached_property
    def candidates(self) -> list[str]:
        """Module classes no other module class of the file needs."""
        return [name for name, users in self.used_by.items() if not users]

    # --- example inputs --------------------------------------------------------------------
    def find_method(self, name: str, method: str) -> ast.FunctionDef | None:
        """``method`` defined on class ``name`` or on one of its bases in this file."""
        visited: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop(0)
            if current in visited:
                continue
            visited.add(current)
            for stmt in self.class_node(current).body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == method:
                    return stmt  # type: ignore[return-value]  # a def, by the isinstance
            stack.extend(self.file_bases(current))
        return None

    def _static_input(self, name: str, method: str) -> bool:
        found = self.find_method(name, method)
        if found is None:
            return False
        decorators = {d.id for d in found.decorator_list if isinstance(d, ast.Name)}
        no_args = not found.decorator_list and not (found.args.args or found.args.posonlyargs)
        return bool(decorators & _STATIC) or no_args

    def init_params(self, name: str) -> tuple[str, ...] | None:
        """Required __init__ arguments of class ``name``; None when they cannot be known."""
        init = self.find_method(name, "__init__")
        if init is None:
            return () if self._inherits_plain_module(name) else None
        positional = [*init.args.posonlyargs, *init.args.args][1:]
        required = positional[: len(positional) - len(init.args.defaults)]
        kw_required = [
            arg for arg, default in zip(init.args.kwonlyargs, init.args.kw_defaults) if default is None
        ]
        return tuple(arg.arg for arg in [*required, *kw_required])

    def _inherits_plain_module(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """True when every base up the file's chain ends in torch.nn.Module itself."""
        for base in self.class_node(name).bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id != name:
                if base.id in seen or not self._inherits_plain_module(base.id, seen | {name}):
                    return False
            elif self.torch_base(base) != "module":
                return False
        return True

    def input_plan(self, name: str) -> InputPlan:
        single = self.candidates == [name]
        inputs = "static" if self._static_input(name, "get_inputs") else None
        if inputs is None and single and "get_inputs" in self.binders:
            inputs = "module"
        init_params = self.init_params(name)
        init = "static" if self._static_input(name, "get_init_inputs") else None
        if init is None and single and "get_init_inputs" in self.binders:
            init = "module"
        if init is None and init_params == ():
            init = "generated"
        return InputPlan(inputs, init, init_params)

    # --- messages --------------------------------------------------------------------------
    def location(self, name: str) -> str:
        line = self.statements[self.classes[name]].line(self.class_node(name).lineno)
        return f"{self.path}:{line}" if self.path else f"line {line}"

    def missing_inputs_message(self, name: str, plan: InputPlan) -> str | None:
        """One line saying exactly what to add and where; None when nothing is missing."""
        if plan.complete:
            return None
        where = f"class {name} at {self.location(name)}"
        hint = self._module_level_hint(name)
        params = ", ".join(plan.init_params or ()) or "its arguments"
        if plan.get_inputs is None:
            init_part = (
                ""
                if plan.get_init_inputs is not None
                else f" (and `get_init_inputs()` for constructor arguments: {params})"
                if plan.init_params
                else " (and `get_init_inputs()` for constructor arguments)"
            )
            return (
                f"{name} has no example inputs: add `@staticmethod def get_inputs()` returning a "
                f"list of input tensors{init_part} to {where}{hint}"
            )
        return (
            f"{name} has no constructor arguments for its example inputs: add `@staticmethod def "
            f"get_init_inputs()` returning [{params}] to {where}{hint}"
        )

    def _module_level_hint(self, name: str) -> str:
        candidates = self.candidates
        if candidates == [name]:
            return ", or module-level get_inputs()/get_init_inputs()"
        users = self.used_by.get(name, ())
        if users:
            return f" (module-level get_inputs() belong to {', '.join(users)}, which uses it)"
        return (
            " (module-level get_inputs() count only in a file with one top-level module; "
            f"this one has {', '.join(candidates)})"
        )


# --- which files and classes are tasks to offer (a folder browsed for modules to optimize) ---------

ANSWER_CLASS = "ModelNew"  # a Kevin / KernelBench answer: a kernel written for a task, not a task
NOT_TASK_FOLDERS = frozenset({
    "tests", "test", "testing", "fixtures", "__fixtures__",  # test code and its fixtures
    ".kevin", ".git", ".hg", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".tox", ".nox", ".venv", "venv", ".env", "env", "site-packages", "build", "dist",  # environments, builds
})


def is_task_folder(folder: Path) -> bool:
    """False for a folder whose files are never tasks: tests and fixtures, kevin's own ``.kevin``,
    virtual environments (by name, or any folder holding a ``pyvenv.cfg``), caches and builds."""
    name = folder.name
    if name in NOT_TASK_FOLDERS or name.endswith(".egg-info"):
        return False
    return not (folder / "pyvenv.cfg").is_file()


def is_task_file(name: str) -> bool:
    """False for a Python file pytest collects or configures with (``test_*.py``, ``*_test.py``,
    ``conftest.py``): its modules are test doubles, not code to optimize."""
    return name.endswith(".py") and not (name.startswith("test_") or name.endswith("_test.py")
                                         or name == "conftest.py")


def offered_classes(names: Iterable[str]) -> list[str]:
    """The module classes of one file to offer as tasks: none when the file defines ``ModelNew``
    (an answer file: its other classes are the reference it was written against or helpers)."""
    names = list(names)
    return [] if ANSWER_CLASS in names else names
