"""Objects of our own generated translation units, compiled once and reused by every build.

The binding (``layout.bindings_cpp``: the declarations of the bound functions and their pybind11
wrappers) was about half of a candidate build's CPU (loading pybind11 and torch's headers, then its
template instantiation), yet it is the same text for every candidate of a task: it names no module (the
module's entry point is a one-line unit of its own, ``layout.module_init_cpp``). So its object is
kept under ``objects/<key>/`` of the build cache, the key a hash of everything the compile reads
that we control (the toolchain, the flags, the text), and a later build with the same key copies it
in instead of compiling it. Only steps the layout marks (``Step.shared_key``) are kept: never one
of the candidate's own units.

A kept object is compiled in a folder and a confined ninja run of its own
(``compile_beside``), beside the candidate's units, never among them: even a compile the
candidate hijacked (a compiler bug, a flag the allow-list missed) writes only its own folder, so it
can shape its own module but never an object another candidate's build reuses. The candidate's
declarations are part of the binding's text, so they are part of its key, with the flags (vetted,
``source.flags``). An object is taken without following a link and only as a regular file under a
size bound.

Builds of one task's candidates that start together (a batch, ``kevin bench``) would each compile the
same binding. So the shared compile takes a lock on its keys first (``objects/locks``, ``flock``: across
processes, released if the holder dies); whoever gets it second finds the object kept and copies it
instead. The candidate's own units compile meanwhile: only the binding's compile waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from kevin_agent.evaluate.build.flags import Toolchain
from kevin_agent.evaluate.build.ninja_file import NinjaRun, Step, append_log, write_ninja
from kevin_agent.evaluate.build.usage import SHARED_LOCKS, touch

# (folder, log file, targets) -> a confined ninja run in that folder
Ninja = Callable[[Path, Path, tuple[str, ...]], NinjaRun]

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


def compile_beside(root: Path, tc: Toolchain, apart: list[Step], files: dict[str, str], work: Path,
                   own: list[Step], log_path: Path, ninja: Ninja) -> NinjaRun:
    """Compile our shared units (``apart``) in a folder and a confined run of their own while the
    candidate's units (``own``) compile in ``work``; keep the shared objects, copy them into
    ``work``, then link there (``work``'s ninja file links them as prebuilt)."""
    folder = work.with_name(work.name + "-shared")
    folder.mkdir()
    for step in apart:
        (folder / step.source).write_text(files[step.source])
    write_ninja(folder, tc, apart, None, [])
    shared_log = work.with_name("shared-build.log")
    done: list[NinjaRun] = []

    def compile_once() -> None:  # a build that started beside us may have kept these meanwhile
        with key_lock(root, apart):
            if not reuse(root, apart, folder):  # every one kept meanwhile: copied, nothing to compile
                done.append(NinjaRun(True, ""))
                return
            ran = ninja(folder, shared_log, ())
            if ran.ok:
                keep(root, apart, folder)
            done.append(ran)

    thread = threading.Thread(target=compile_once, name="kevin-shared-compile", daemon=True)
    thread.start()
    targets = tuple(step.output for step in own)  # not the link: the shared objects are not in yet
    mine = ninja(work, log_path, targets) if targets else NinjaRun(True, "")
    thread.join()
    theirs = done[0] if done else NinjaRun(False, "\nerror: the shared unit's compile did not report\n")
    append_log(log_path, theirs.output)
    shared_log.unlink(missing_ok=True)
    output = mine.output + theirs.output
    if not (mine.ok and theirs.ok):
        shutil.rmtree(folder, ignore_errors=True)
        return NinjaRun(False, output, mine.timed_out or theirs.timed_out)
    copied = copy_in(apart, folder, work)
    shutil.rmtree(folder, ignore_errors=True)
    if not copied:
        return NinjaRun(False, output + "\nerror: a shared object could not be copied into the build\n")
    link = ninja(work, log_path, ())
    return NinjaRun(link.ok, output + link.output, link.timed_out)


def copy_in(steps: list[Step], folder: Path, work: Path) -> bool:
    """Copy each step's object from ``folder`` (where it was compiled apart) into ``work``."""
    return all(_copy_regular(folder / step.output, work / step.output) for step in steps)


@contextlib.contextmanager
def key_lock(root: Path, steps: list[Step]) -> Iterator[None]:
    """Hold the lock of these steps' keys (one file per set of keys under ``objects/locks``)."""
    keys = "\n".join(sorted(step.shared_key for step in steps if step.shared_key))
    folder = root / OBJECTS / SHARED_LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / hashlib.sha256(keys.encode()).hexdigest()[:32],
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def keep(root: Path, steps: list[Step], work: Path) -> None:
    """Keep the object of each shared step compiled in ``work`` (whole or not at all; a concurrent
    build keeping the same key first wins). ``work`` must be a folder no candidate unit compiled in."""
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
