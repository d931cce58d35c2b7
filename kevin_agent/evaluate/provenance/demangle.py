"""Itanium C++ demangling, the way the profiler does it.

Kineto names a kernel with ``abi::__cxa_demangle`` of the name CUPTI reports (and keeps the raw
name when that fails), so demangling our mangled symbols with the same libstdc++ function gives
the profiler's spelling exactly: ``_Z10add_kernelPKfS0_Pfi`` -> ``add_kernel(float const*, float
const*, float*, int)``. Only libstdc++'s ``__cxa_demangle`` through ctypes (present wherever torch
is); without it nothing is demangled and callers fall back to mangled-name matching. No program
is run: the names come from a candidate's build, and a ``c++filt`` child would be one more
unconfined process reading them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Callable, Iterable

_lock = threading.Lock()


def _load_cxa() -> Callable[[str], str | None] | None:
    candidates: list[str | None] = [None, "libstdc++.so.6", ctypes.util.find_library("stdc++")]
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
            libc = ctypes.CDLL(None)
            free = libc.free
        except (OSError, AttributeError, TypeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        free.argtypes = [ctypes.c_void_p]
        free.restype = None

        def demangle(mangled: str, fn=fn, free=free) -> str | None:
            status = ctypes.c_int(-1)
            with _lock:
                pointer = fn(mangled.encode(), None, None, ctypes.byref(status))
                if not pointer:
                    return None
                try:
                    text = ctypes.string_at(pointer).decode("utf-8", "replace")
                finally:
                    free(pointer)
            return text if status.value == 0 else None

        if demangle("_Z1fv") == "f()":
            return demangle
    return None


@functools.lru_cache(maxsize=1)
def _cxa() -> Callable[[str], str | None] | None:
    return _load_cxa()


def backend() -> str:
    """Which demangler is in use: "cxa" or "none"."""
    return "cxa" if _cxa() is not None else "none"


def is_mangled(name: str) -> bool:
    return name.startswith("_Z")


def demangle_many(names: Iterable[str]) -> dict[str, str]:
    """Mangled name -> demangled, for the names that could be demangled (others are left out)."""
    wanted = [n for n in dict.fromkeys(names) if is_mangled(n)]
    if not wanted:
        return {}
    if _cxa() is None:
        return {}
    result = {}
    for name in wanted:
        text = _cached(name)
        if text is not None:
            result[name] = text
    return result


@functools.lru_cache(maxsize=4096)
def _cached(name: str) -> str | None:
    cxa = _cxa()
    return cxa(name) if cxa is not None else None


def demangle(name: str) -> str | None:
    """The demangled name, or None when it is not a mangled C++ name or no demangler is available."""
    return demangle_many([name]).get(name)
