"""All-or-nothing file writes: each file via temp file + rename; a failure undoes the earlier ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.atomic import write_bytes_atomically
from kevin_agent.errors import EnvironmentProblem, UserInputError


def read_existing(path: Path) -> Optional[str]:
    """The file's text, None when absent; refuses a folder or unreadable file in the way."""
    if not path.exists():
        return None
    if not path.is_file():
        raise UserInputError(f"{path} exists and is not a file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path} exists and cannot be read as text: {err}") from None


def check_no_conflicts(files: dict[Path, str], label=lambda p: str(p)) -> None:
    """Refuse when a target exists with other content (identical content is fine: nothing is lost)."""
    for path, content in files.items():
        existing = read_existing(path)
        if existing is not None and existing != content:
            raise UserInputError(
                f"{label(path)} already exists with other content: move it away or pick another "
                f"target directory (nothing was written)"
            )


@dataclass
class WrittenFiles:
    """What a write changed, so that it can be undone."""

    created: list[Path] = field(default_factory=list)
    replaced: dict[Path, bytes] = field(default_factory=dict)  # path -> previous bytes
    made_dirs: list[Path] = field(default_factory=list)

    def rollback(self) -> None:
        for path in reversed(self.created):
            path.unlink(missing_ok=True)
        for path, previous in self.replaced.items():
            write_bytes_atomically(path, previous)
        for folder in reversed(self.made_dirs):
            try:
                folder.rmdir()
            except OSError:
                pass


def _make_dirs(folder: Path, written: WrittenFiles) -> None:
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir()
        written.made_dirs.append(directory)


def write_files(files: dict[Path, str]) -> WrittenFiles:
    """Write every file or none: on any failure the ones already written are rolled back."""
    written = WrittenFiles()
    try:
        for path, content in files.items():
            _make_dirs(path.parent, written)
            data = content.encode("utf-8")
            previous = path.read_bytes() if path.exists() else None
            if previous == data:
                continue
            write_bytes_atomically(path, data)
            if previous is None:
                written.created.append(path)
            else:
                written.replaced[path] = previous
    except OSError as err:
        written.rollback()
        raise EnvironmentProblem(f"cannot write {err.filename or 'the kernel files'}: "
                                 f"{err.strerror or err} (nothing was written)") from None
    return written
