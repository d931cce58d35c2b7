"""Module classes of an editor buffer, with the last good parse kept for buffers mid-edit."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pygls.uris import to_fs_path

from kevin_agent.errors import UserInputError
from kevin_agent.store import find_repo_root
from kevin_agent.task import ModuleClass, find_module_classes

_CLASS_LINE = re.compile(r"^(\s*)class\s+([A-Za-z_]\w*)\s*[(:]")


@dataclass(frozen=True)
class Scan:
    """The classes of one buffer; ``syntax_error`` set when the text does not parse now."""

    classes: tuple[ModuleClass, ...]
    syntax_error: Optional[str] = None


class ClassIndex:
    """find_module_classes per buffer; on a syntax error the last good classes are kept."""

    def __init__(self) -> None:
        self._last_good: dict[str, tuple[ModuleClass, ...]] = {}
        self._lock = threading.Lock()

    def scan(self, uri: str, source: str) -> Scan:
        """The buffer's classes; messages name the file ("model.py:3"), not ``<source>``."""
        path = uri_path(uri)
        try:
            classes = tuple(find_module_classes(source, path.name if path is not None else None))
        except UserInputError as err:
            with self._lock:
                kept = self._last_good.get(uri, ())
            return Scan(kept, str(err))
        with self._lock:
            self._last_good[uri] = classes
        return Scan(classes)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._last_good.pop(uri, None)


def enclosing(classes: tuple[ModuleClass, ...], line: int) -> Optional[ModuleClass]:
    """The innermost class whose lines hold the 0-based ``line``."""
    inside = [c for c in classes if c.start_line - 1 <= line <= c.end_line - 1]
    return max(inside, key=lambda c: c.start_line) if inside else None


def class_name_near(source: str, line: int) -> Optional[str]:
    """For text that does not parse: the nearest ``class X`` line at or above ``line``."""
    lines = source.splitlines()
    for index in range(min(line, len(lines) - 1), -1, -1):
        match = _CLASS_LINE.match(lines[index])
        if match:
            return match.group(2)
    return None


def class_line(classes: tuple[ModuleClass, ...], name: str) -> Optional[int]:
    """0-based line of class ``name``, None when it is gone."""
    for module in classes:
        if module.name == name:
            return module.start_line - 1
    return None


def uri_path(uri: str) -> Optional[Path]:
    """The file behind a file:// URI, None for other schemes."""
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return Path(path) if path else None


def repo_root(path: Path) -> Optional[Path]:
    """The git repository holding the file ``path`` (the store's own lookup)."""
    return find_repo_root(path.parent)
