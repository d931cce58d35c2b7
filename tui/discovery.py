"""Find the modules to optimize under a folder, by reading files (no user code runs): the nn.Module
classes of files that are tasks (``kevin_agent.task.modules``' rule: no tests, fixtures,
environments or answer files)."""

from __future__ import annotations

import os
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.accept.find import drop_in_origin
from kevin_agent.errors import KevinError
from kevin_agent.task import ModuleClass, find_module_classes
from kevin_agent.task.modules import is_task_file, is_task_folder, offered_classes

MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class ModuleEntry:
    """One nn.Module class of one file, with its accepted kernel's speedup when there is one."""

    path: Path  # absolute
    label: str  # path relative to the browsed folder
    module: ModuleClass
    accepted_speedup: Optional[float] = None
    accepted_run: str = ""
    drop_in_of: Optional[str] = None  # "models/block.py::FusedBlock" for an accepted kernel's drop-in

    @property
    def original_class(self) -> str:
        """The class this drop-in replaces ("" for a module to optimize)."""
        return (self.drop_in_of or "").rpartition("::")[2]

    @property
    def spec(self) -> str:
        """``FILE.py::Class`` for load_task."""
        return f"{self.path}::{self.module.name}"


def python_files(root: Path) -> Iterator[Path]:
    """The task files under ``root`` (skipping tests, fixtures, environments and caches below it),
    or ``root`` itself when it is a file: a file named on purpose is always read."""
    if root.is_file():
        if root.suffix == ".py":
            yield root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if is_task_folder(Path(folder) / d))
        for name in sorted(files):
            if is_task_file(name):
                yield Path(folder) / name


def _read(path: Path) -> Optional[str]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        with tokenize.open(path) as handle:
            return handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _accepted(repo_root: Optional[Path], path: Path, class_name: str) -> tuple[Optional[float], str]:
    if repo_root is None:
        return None, ""
    from kevin_agent.accept import find_accepted

    found = find_accepted(repo_root, path, class_name)
    return (found.speedup_vs_eager, found.run_id) if found else (None, "")


def scan_modules(root: Path, repo_root: Optional[Path] = None) -> list[ModuleEntry]:
    """The modules to optimize under ``root`` (and accepted drop-ins, marked), sorted by path and
    line; unreadable or broken files are skipped."""
    root = root.resolve()
    base = root if root.is_dir() else root.parent
    entries: list[ModuleEntry] = []
    for path in python_files(root):
        source = _read(path)
        if not source or "Module" not in source:
            continue
        try:
            classes = find_module_classes(source, str(path))
        except KevinError:
            continue  # a syntax error: not ours to report here
        label = path.relative_to(base).as_posix()
        offered = set(offered_classes(module.name for module in classes))
        for module in classes:
            origin = drop_in_origin(path, module.name)
            if origin is not None:  # written by accept: the kernel of another module, not a new one
                entries.append(ModuleEntry(path, label, module, drop_in_of=origin))
                continue
            if module.name not in offered:
                continue
            speedup, run_id = _accepted(repo_root, path, module.name)
            entries.append(ModuleEntry(path, label, module, speedup, run_id))
    return sorted(entries, key=lambda e: (e.label, e.module.start_line))
