"""Read a build's provenance facts in a confined child, never in kevin's own process.

The parent opens each own object and preprocessed translation unit the compile left in its
folder (never through a link, a regular file under ``MAX_INPUT_BYTES`` in all) and hands them to
``provenance.facts_child`` as framed stdin, under ``sandbox.listing_policy`` (no file, process or
socket; bounded memory and output). The answer is one JSON line. Any failure is facts with an
``error``, which the provenance decision treats as a rejection (it fails closed).
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.processes import kill_group, scrubbed_environment
from kevin_agent.evaluate.sandbox.limits import limit_message

FACTS_TIMEOUT_S = 120.0
MAX_INPUT_BYTES = 512 * 1024 * 1024
CHILD = "kevin_agent.evaluate.provenance.facts_child"


def _read(path: Path, left: int) -> bytes:
    """The bytes of a regular file at ``path`` (not through a link), at most ``left``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > left:
            raise OSError(f"{path.name} is not a regular file under {left:,} bytes")
        return handle.read(left)


def framed_input(folder: Path, objects: list[str], preprocessed: list[tuple[str, str]]) -> tuple[list[str], bytes]:
    """(the child's arguments, its stdin) for these files of ``folder``."""
    args, frames, left = [], [], MAX_INPUT_BYTES
    for name, kind in [(o, "obj") for o in objects] + list(preprocessed):
        data = _read(folder / name, left)
        left -= len(data)
        args.append(f"{name}:{kind}")
        frames += [struct.pack("<Q", len(data)), data]
    return args, b"".join(frames)


def command(args: list[str], scratch: str, sandbox: SandboxMode) -> list[str]:
    if sandbox == "off":
        return [sys.executable, "-m", CHILD, *args]
    from kevin_agent.evaluate.sandbox import launch_command, listing_policy
    from kevin_agent.paths import protected_paths

    return launch_command(listing_policy(scratch, protect=protected_paths()), [CHILD, *args], sandbox, module=True)


def build_facts(folder: Path, objects: list[str], preprocessed: list[tuple[str, str]], sandbox: SandboxMode = "auto",
                timeout_s: float = FACTS_TIMEOUT_S) -> dict[str, Any]:
    """``provenance.facts.gather`` of the build in ``folder``, read in a confined child; never raises."""
    try:
        args, data = framed_input(folder, objects, preprocessed)
    except OSError as exc:
        return {"error": f"cannot read the build's output: {exc.strerror or exc}"}
    with tempfile.TemporaryDirectory(prefix="kevin-facts-") as scratch:
        try:
            proc = subprocess.Popen(command(args, scratch, sandbox), cwd=scratch,
                                    env=scrubbed_environment(scratch=scratch), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return {"error": f"the facts child did not start: {exc}"}
        try:
            out, err = proc.communicate(data, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"reading the build's facts did not finish within {timeout_s:g} s"}
        finally:
            kill_group(proc)
    return _reply(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def _reply(returncode: int, out: str, err: str) -> dict[str, Any]:
    if returncode != 0:
        tail = limit_message(err) or (err.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return {"error": tail[:300]}
    try:
        raw = json.loads((out.strip().splitlines() or [""])[-1])
        if not isinstance(raw, dict) or not isinstance(raw.get("imports"), dict):
            raise ValueError("not a facts record")
    except ValueError as exc:
        return {"error": f"no facts came back ({exc})"}
    return raw
