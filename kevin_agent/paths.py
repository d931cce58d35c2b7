"""Where things are: the git repository above a path (the store, accept and the sandbox use it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def find_repo_root(start: Path) -> Optional[Path]:
    """The nearest directory at or above ``start`` holding ``.git`` (a directory or a file)."""
    current = Path(start).resolve()
    if current.is_file():
        current = current.parent
    for directory in (current, *current.parents):
        if (directory / ".git").exists():
            return directory
    return None


def protected_paths() -> list[str]:
    """What confined children must never see besides the home: the repository we run in."""
    root = find_repo_root(Path.cwd())
    return [str(root)] if root is not None else []
