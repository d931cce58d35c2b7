"""Raw system calls through ctypes: the C library handle, errno text, the machine's architecture.

Standard library only; no other module of kevin_agent is imported (this runs before torch).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import Optional

_LIBC: Optional[ctypes.CDLL] = None


def libc() -> ctypes.CDLL:
    """The process's C library (``syscall``, ``prctl``), loaded once, with errno capture."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
        _LIBC.prctl.restype = ctypes.c_int
        _LIBC.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return _LIBC


class SyscallError(OSError):
    """A raw system call failed; ``errno`` and ``call`` say which and why."""

    errno: int  # always set (OSError's may be None)

    def __init__(self, call: str, code: int) -> None:
        super().__init__(code, f"{call}: {errno_text(code)}")
        self.call = call


def errno_text(code: int) -> str:
    """``EPERM (Operation not permitted)``."""
    return f"{errno.errorcode.get(code, str(code))} ({os.strerror(code)})"


def _arg(value: object) -> object:
    if value is None:
        return ctypes.c_void_p(None)
    if isinstance(value, int):
        return ctypes.c_long(value)
    return value  # already a ctypes object (pointer, byref)


def syscall(number: int, *args: object, name: str = "syscall") -> int:
    """Call ``number`` with ``args`` (ints become ``long``); raises SyscallError on -1."""
    result = libc().syscall(ctypes.c_long(number), *[_arg(a) for a in args])
    if result == -1:
        raise SyscallError(name, ctypes.get_errno())
    return int(result)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0, name: str = "prctl") -> int:
    result = libc().prctl(option, arg2, arg3, arg4, arg5)
    if result == -1:
        raise SyscallError(name, ctypes.get_errno())
    return int(result)


def machine() -> str:
    """``x86_64``, ``aarch64`` or what the kernel calls the machine."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def thread_count() -> int:
    """Threads of this process now (1 when /proc cannot be read)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1
