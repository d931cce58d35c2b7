"""Objects of our own generated translation units, compiled once and reused by every build.

The binding (``layout.bindings_cpp``: the declarations of the bound functions and their pybind11
wrappers) is about half of a candidate build's CPU (its template instantiation, against the full
torch header), yet it is the same text for every candidate of a task: it names no module (the
module's entry point is a one-line unit of its own, ``layout.module_init_cpp``). So its object is
kept under ``objects/<key>/`` of the build cache, the key a hash of everything the compile reads
that we control (the toolchain, the flags, the text), and a later build with the same key copies it
in instead of compiling it. Only steps the layout marks (``Step.shared_key``) are kept: never a
unit of the candidate's own text.

A kept object was compiled in the same confined ninja run as the candidate's units. Compilers run
none of the candidate's code and every flag it passes is vetted (``source.flags``: none names an
output), so the object is what the compiler made of our text; it is taken without following a link
and only as a regular file under a size bound.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from kevin_agent.evaluate.build.ninja_file import Step
from kevin_agent.evaluate.build.usage import touch

OBJECTS = "objects"
OBJECT_FILE = "object.o"
MAX_OBJECT_BYTES = 256 * 1024 * 1024


def reuse(root: Path, steps: list[Step], work: Path) -> list[Step]:
    """Copy the kept object of each shared step into ``work`` under its output's name; the steps
    left to compile (the others)."""
    left = []
    for step in steps:
        kept = root / OBJECTS / step.shared_key / OBJECT_FILE if step.shared_key else None
        if kept is not None and _copy_regular(kept, work / step.output):
            touch([kept.parent])  # in use: the cache's size cap evicts least recently used first
            continue
        left.append(step)
    return left


def keep(root: Path, steps: list[Step], work: Path) -> None:
    """After a successful build: keep the object of each shared step compiled now (whole or not
    at all; a concurrent build keeping the same key first wins)."""
    for step in steps:
        if not step.shared_key or (root / OBJECTS / step.shared_key).is_dir():
            continue
        (root / OBJECTS).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="new-", dir=root / OBJECTS))
        if _copy_regular(work / step.output, tmp / OBJECT_FILE):
            try:
                os.rename(tmp, root / OBJECTS / step.shared_key)
                continue
            except OSError:  # kept meanwhile by another build
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_regular(source: Path, target: Path) -> bool:
    """Copy ``source`` (a regular file under MAX_OBJECT_BYTES, not a link) to the new file ``target``."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with open(fd, "rb") as src:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_OBJECT_BYTES:
            return False
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError:
            return False
        with open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1024 * 1024)
    return True
