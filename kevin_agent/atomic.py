"""Never half-written files: write a temporary file in the same folder, then rename it over."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename; the temporary file is removed on failure."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """UTF-8 text through ``write_bytes_atomically``."""
    write_bytes_atomically(path, text.encode("utf-8"))
