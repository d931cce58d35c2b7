"""The launcher's side of a confined child: it passes the child's output on up to a cap, watches
the child's scratch folder against a disk budget, and ends with the child.

The child (the first process of its PID namespace) writes into pipes; ``relay`` copies them to
the launcher's own stdout and stderr. When the child prints more than ``max_output_bytes`` on
one stream, or its scratch holds more than ``max_scratch_bytes`` (or more than ``MAX_ENTRIES``
files), the child is killed, and with it every process of its namespace, and one line starting
with ``limits.LIMIT_PREFIX`` on stderr says which limit; the launcher then exits with
``EXIT_LIMIT``. Otherwise the launcher exits as the child did (the same code, or the same signal).
Standard library only.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from kevin_agent.evaluate.sandbox.limits import LIMIT_PREFIX, megabytes

EXIT_LIMIT = 71
MAX_ENTRIES = 100_000  # files and folders in a scratch folder
WATCH_INTERVAL_S = 0.25
_CHUNK = 1 << 16


@dataclass
class Caps:
    max_output_bytes: int = 0  # per stream; 0: unbounded
    max_scratch_bytes: int = 0  # 0: not watched
    scratch: Sequence[str] = ()
    what: str = "the process"  # "your compile", "your code": the subject of the limit line


@dataclass
class _Stream:
    source: int
    target: int
    written: int = 0
    open: bool = True


@dataclass
class _State:
    streams: list[_Stream] = field(default_factory=list)
    verdict: Optional[str] = None


def disk_usage(folders: Sequence[str], stop_after: int = MAX_ENTRIES) -> tuple[int, int]:
    """(bytes allocated on disk, entries) under ``folders``, symbolic links not followed; stops
    counting entries past ``stop_after``."""
    used = entries = 0
    stack = list(folders)
    while stack and entries <= stop_after:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return used, entries


def _over_budget(caps: Caps) -> Optional[str]:
    if not caps.max_scratch_bytes or not caps.scratch:
        return None
    used, entries = disk_usage(caps.scratch)
    if used > caps.max_scratch_bytes:
        return f"{caps.what} wrote more than {megabytes(caps.max_scratch_bytes)} into its folder and was stopped"
    if entries > MAX_ENTRIES:
        return f"{caps.what} made more than {MAX_ENTRIES} files in its folder and was stopped"
    return None


def _pump(stream: _Stream, caps: Caps, state: _State) -> None:
    try:
        data = os.read(stream.source, _CHUNK)
    except OSError:
        data = b""
    if not data:
        stream.open = False
        return
    room = caps.max_output_bytes - stream.written if caps.max_output_bytes else len(data)
    if room > 0:
        _write_all(stream.target, data[:room])
        stream.written += min(room, len(data))
    if caps.max_output_bytes and len(data) > room and state.verdict is None:
        state.verdict = f"{caps.what} printed more than {megabytes(caps.max_output_bytes)} and was stopped"


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return  # the reader went away: keep draining, drop the output


def relay(child: int, pipes: Sequence[tuple[int, int]], caps: Caps) -> int:
    """Copy each (read end, target fd) until the child ends or a limit is hit; the exit status."""
    state = _State([_Stream(source, target) for source, target in pipes])
    selector = selectors.DefaultSelector()
    for stream in state.streams:
        selector.register(stream.source, selectors.EVENT_READ, stream)
    ended = _child_end(child, selector)
    _forward_termination(child)
    status: Optional[int] = None
    next_check = time.monotonic()
    while state.verdict is None and status is None:
        for key, _ in selector.select(timeout=WATCH_INTERVAL_S if ended is not None else 0.02):
            if key.data is None:  # the pidfd: the child ended
                selector.unregister(key.fd)
                continue
            _pump(key.data, caps, state)
            if not key.data.open:
                selector.unregister(key.fd)
        if time.monotonic() >= next_check:
            state.verdict = _over_budget(caps)
            next_check = time.monotonic() + WATCH_INTERVAL_S
        status = _reaped(child)
    if state.verdict is None:
        _drain(selector, caps, state)
    if state.verdict is None:
        state.verdict = _over_budget(caps)  # what the child left behind
    if state.verdict is not None:
        _kill(child)
        if status is None:
            _wait(child)
        _write_all(2, f"\n{LIMIT_PREFIX}{state.verdict}\n".encode())
        return EXIT_LIMIT
    return _as_own(status if status is not None else _wait(child))


def _child_end(child: int, selector: selectors.BaseSelector) -> Optional[int]:
    """A pidfd of the child in ``selector`` (readable once it ends), or None (Linux < 5.3)."""
    try:
        fd = os.pidfd_open(child)
    except (AttributeError, OSError):
        return None
    selector.register(fd, selectors.EVENT_READ, None)
    return fd


def _drain(selector: selectors.BaseSelector, caps: Caps, state: _State, limit_s: float = 2.0) -> None:
    """After the child ended, copy what is left in the pipes; stop after ``limit_s`` (a process
    outside a PID namespace may still hold them open)."""
    deadline = time.monotonic() + limit_s
    while any(key.data is not None for key in selector.get_map().values()) and time.monotonic() < deadline:
        events = selector.select(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
        if not events:
            return
        for key, _ in events:
            if key.data is None:
                selector.unregister(key.fd)
                continue
            _pump(key.data, caps, state)
            if not key.data.open:
                selector.unregister(key.fd)


def _reaped(child: int) -> Optional[int]:
    try:
        pid, status = os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        return 0
    return status if pid == child else None


def _wait(child: int) -> int:
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def _kill(child: int) -> None:
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _forward_termination(child: int) -> None:
    """SIGTERM, SIGINT, SIGHUP to the launcher end the child (the first process of a PID
    namespace ignores signals it has no handler for) and then the launcher."""
    def handler(number: int, _frame: object) -> None:
        _kill(child)
        _wait(child)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, handler)


def _as_own(status: int) -> int:
    """Exit as the child did: its code, or die of its signal (no core dump)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        sys.stdout.flush()
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (OSError, ValueError):
            pass
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1

