"""What the build cache holds, by part, and keeping it under a size cap.

The cache folder (``cache.default_cache_root``) holds the built extensions (``ext/<key>``), the
shared precompiled torch headers (``pch/``), the shared objects of our generated units
(``objects/``), the measured baselines, torch.compile's and the CUDA driver's caches.
``evict_least_recent`` removes whole build entries, shared objects and precompiled headers, least
recently used first (the parent touches each as a build uses it), until the folder fits the cap; an
entry used within ``grace_s`` is never removed (a worker may be loading it, a compile reading it). A
header left by another torch or venv is never read again, so it goes first. An entry leaves by a
rename into ``tmp/`` first, so a reader sees a whole entry or none. ``clear`` empties the folder.
Standard library only: this runs in the parent and in ``kevin cache``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# part -> the folders under the cache root it is made of ("other": everything else)
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("headers (precompiled torch headers)", ("pch",)),
    ("builds (compiled candidates)", ("ext",)),
    ("shared objects (the generated bindings)", ("objects",)),
    ("baselines (eager and torch.compile timings)", ("baselines",)),
    ("torch.compile caches (Inductor, Triton)", ("inductor", "triton")),
    ("CUDA JIT cache", ("cuda-jit",)),
)
BUILDS = "ext"
HEADERS = "pch"
SHARED_OBJECTS = "objects"
SHARED_LOCKS = "locks"  # objects/locks: the lock files of shared compiles (build.shared_objects.key_lock)
DEFAULT_GRACE_S = 600.0


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed; vanished files skipped)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def part_sizes(root: Path) -> list[tuple[str, int]]:
    """(part, bytes) for each part of the cache, "other" last."""
    named = {folder for _, folders in PARTS for folder in folders}
    sizes = [(label, sum(tree_size(root / f) for f in folders)) for label, folders in PARTS]
    rest = [child for child in _children(root) if child.name not in named]
    return sizes + [("other (locks, scratch)", sum(tree_size(c) if c.is_dir() else _size(c) for c in rest))]


def touch(entries: Iterable[Path]) -> None:
    """Mark build entries used now (their place in the least-recently-used order)."""
    for entry in entries:
        try:
            os.utime(entry)
        except OSError:
            continue


@dataclass(frozen=True)
class Eviction:
    removed: int
    freed: int
    size: int  # the cache's size afterwards


def evict_least_recent(root: Path, cap_bytes: int, grace_s: float = DEFAULT_GRACE_S,
                       now: Optional[float] = None) -> Eviction:
    """Remove build entries, shared objects and precompiled headers, least recently used first, until
    the cache fits ``cap_bytes``."""
    size = tree_size(root)
    if size <= cap_bytes:
        return Eviction(0, 0, size)
    now = time.time() if now is None else now
    objects = [e for e in _children(root / SHARED_OBJECTS) if e.name != SHARED_LOCKS]  # locks: held, tiny
    candidates = [*_children(root / BUILDS), *_children(root / HEADERS), *objects]
    entries = sorted(((_mtime(e), e) for e in candidates if e.is_dir() and not e.is_symlink()),
                     key=lambda item: item[0])
    removed = freed = 0
    for used, entry in entries:
        if size - freed <= cap_bytes or now - used < grace_s:
            break  # sorted: every later entry was used more recently
        bytes_ = tree_size(entry)
        if _remove(root, entry):
            removed, freed = removed + 1, freed + bytes_
    return Eviction(removed, freed, size - freed)


def clear(root: Path) -> int:
    """Empty the cache folder (the folder itself stays); the bytes freed."""
    freed = 0
    for child in _children(root):
        bytes_ = tree_size(child) if child.is_dir() and not child.is_symlink() else _size(child)
        if child.is_dir() and not child.is_symlink():
            if child.name == "tmp":  # the scratch entries are renamed into: emptied in place
                shutil.rmtree(child, ignore_errors=True)
                freed += bytes_
            elif _remove(root, child):
                freed += bytes_
        else:
            child.unlink(missing_ok=True)
            freed += bytes_
    return freed


def _remove(root: Path, folder: Path) -> bool:
    """Rename ``folder`` out of the way, then delete it; False when it vanished meanwhile."""
    scratch = root / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="evicted-", dir=scratch))
    try:
        os.rename(folder, target / "entry")
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        return False
    shutil.rmtree(target, ignore_errors=True)
    return True


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
