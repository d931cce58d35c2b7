"""Resource limits a confined process gets before its seccomp layer (which then refuses to raise
them): its address space where the policy sets one (RLIMIT_AS), the largest file it may write
(RLIMIT_FSIZE; SIGXFSZ ignored, so an oversized write fails with EFBIG, "File too large",
instead of killing silently) and no core dumps (a crash would otherwise write the process's
memory into its scratch). Standard library only.

The lines a launcher prints when a limit stops a child start with ``LIMIT_PREFIX``;
``limit_message(text)`` finds the first one in a child's output, for the verdict.
"""

from __future__ import annotations

import resource
import signal
import threading
from typing import Optional

LIMIT_PREFIX = "kevin-sandbox: limit: "
FILE_TOO_LARGE = "File too large"
MIB = 1024 * 1024


def megabytes(size: int) -> str:
    """``16 MB`` (MiB, rounded)."""
    return f"{max(1, round(size / MIB))} MB"


def _lower(which: int, value: int) -> bool:
    soft, hard = resource.getrlimit(which)
    new = value if hard == resource.RLIM_INFINITY else min(value, hard)
    if soft != resource.RLIM_INFINITY and soft <= new and hard <= new:
        return False
    resource.setrlimit(which, (new, new))
    return True


def apply_limits(max_file_bytes: int, max_memory_bytes: int = 0) -> list[str]:
    """Lower RLIMIT_FSIZE to ``max_file_bytes`` and RLIMIT_AS to ``max_memory_bytes`` (0:
    unchanged) and RLIMIT_CORE to 0; what applied."""
    applied = []
    if max_memory_bytes > 0:
        _lower(resource.RLIMIT_AS, max_memory_bytes)
        applied.append(f"address space up to {megabytes(max_memory_bytes)}")
    if max_file_bytes > 0:
        _lower(resource.RLIMIT_FSIZE, max_file_bytes)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited across execve
        applied.append(f"files up to {megabytes(max_file_bytes)}")
    _lower(resource.RLIMIT_CORE, 0)
    return applied


def limit_message(text: str) -> Optional[str]:
    """The first launcher line saying a limit stopped the child (without the prefix), or a
    sentence for a write refused by RLIMIT_FSIZE; None when no limit was hit."""
    for line in text.splitlines():
        if line.startswith(LIMIT_PREFIX):
            return line[len(LIMIT_PREFIX):].strip()
    if FILE_TOO_LARGE in text:
        return "a file written was larger than the sandbox allows (File too large)"
    return None
