"""Benchmark tasks: KernelBench-format files (``class Model``, ``get_inputs``, ``get_init_inputs``).

A folder is searched for level folders (``level1``, ``level2``, ...) holding task files, or is a
level folder itself; a file is a task. Levels come from the folder name (``level<N>``), else 0.
Tasks sort by level, then by their leading number (``12_Gemm.py`` after ``2_Add.py``), then name.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.errors import UserInputError

_LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"^(\d+)")


@dataclass(frozen=True)
class BenchTask:
    """One task file and the level it belongs to."""

    path: Path
    level: int

    @property
    def name(self) -> str:
        """``level1/3_Batched_matmul`` style: unique within a benchmark, readable in a table."""
        return f"level{self.level}/{self.path.stem}"

    @property
    def target(self) -> str:
        """What ``kevin optimize`` takes for it."""
        return f"{self.path}::Model"


def level_of(path: Path) -> int:
    """The level of a task file from its folder's name (0 when the folder names none)."""
    match = _LEVEL_DIR.match(path.parent.name)
    return int(match.group(1)) if match else 0


def _order(task: BenchTask) -> tuple[int, int, str]:
    match = _LEADING_NUMBER.match(task.path.name)
    return task.level, int(match.group(1)) if match else 1 << 30, task.path.name


def _task_files(folder: Path) -> list[Path]:
    levels = [child for child in folder.iterdir() if child.is_dir() and _LEVEL_DIR.match(child.name)]
    folders = levels or [folder]
    return [path for sub in folders for path in sub.glob("*.py") if not path.name.startswith("_")]


def _expand(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if not path.exists():
            raise UserInputError(f"{given}: no such file or folder (give a KernelBench folder or task files)")
        found.extend(_task_files(path) if path.is_dir() else [path])
    return found


def find_tasks(paths: Sequence[str], levels: Optional[Iterable[int]] = None, limit: Optional[int] = None,
               pattern: Optional[str] = None) -> list[BenchTask]:
    """The tasks under ``paths``, filtered by level and by ``pattern`` (a glob on the task's name
    or file name), at most ``limit`` per level. UserInputError (one line) when none remain."""
    wanted = set(levels) if levels is not None else None
    tasks = sorted({BenchTask(p.resolve(), level_of(p.resolve())) for p in _expand(paths)}, key=_order)
    if wanted is not None:
        tasks = [task for task in tasks if task.level in wanted]
    if pattern:
        tasks = [task for task in tasks
                 if fnmatch.fnmatch(task.name, pattern) or fnmatch.fnmatch(task.path.name, pattern)]
    if limit is not None:
        kept: dict[int, int] = {}
        chosen = []
        for task in tasks:
            if kept.get(task.level, 0) < limit:
                kept[task.level] = kept.get(task.level, 0) + 1
                chosen.append(task)
        tasks = chosen
    if not tasks:
        raise UserInputError(f"no tasks found in {', '.join(paths)} (check --levels / --tasks; a task file "
                             "defines class Model, get_inputs and get_init_inputs)")
    return tasks


def parse_levels(text: Optional[str]) -> Optional[list[int]]:
    """``"1,2"`` -> [1, 2]; UserInputError naming the bad part."""
    if text is None:
        return None
    levels = []
    for part in text.split(","):
        part = part.strip().removeprefix("level")
        if not part.isdigit():
            raise UserInputError(f"--levels: {part!r} is not a level number (e.g. --levels 1,2)")
        levels.append(int(part))
    return levels
