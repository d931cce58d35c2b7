"""no_new_privs and dropping capabilities (a worker started as root keeps none).

no_new_privs: execve can never grant privileges again (setuid bits and file capabilities are
ignored) and it cannot be unset; Landlock and seccomp require it. Capabilities: the bounding set
is emptied (so even an execve as uid 0 gains nothing back), ambient ones cleared, and the
calling thread's effective, permitted and inheritable sets zeroed. Capabilities belong to a
thread: threads that already exist keep theirs (confine before they start; see confine()).
"""

from __future__ import annotations

import ctypes

from kevin_agent.evaluate.sandbox._sys import SyscallError, machine, prctl, syscall

PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAPSET = {"x86_64": 126, "aarch64": 91}


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, name="prctl(PR_SET_NO_NEW_PRIVS)")


def no_new_privs() -> bool:
    try:
        return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
    except SyscallError:
        return False


def _capability_sets() -> tuple[int, int]:
    """(CapEff, CapPrm) of this thread, from /proc ((0, 0) when unreadable)."""
    values = {}
    try:
        with open("/proc/thread-self/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("CapEff", "CapPrm"):
                    values[key] = int(rest.split()[0], 16)
    except (OSError, ValueError, IndexError):
        pass
    return values.get("CapEff", 0), values.get("CapPrm", 0)


def has_capabilities() -> bool:
    effective, permitted = _capability_sets()
    return bool(effective or permitted)


CAP_SETPCAP = 8


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Drop every capability of this thread (and, holding CAP_SETPCAP, the bounding set).

    Returns False when the thread held none (an ordinary user: no_new_privs already keeps
    setuid programs from granting any)."""
    effective, permitted = _capability_sets()
    if not (effective or permitted):
        return False
    if effective & (1 << CAP_SETPCAP):
        for cap in range(64):
            try:
                present = prctl(PR_CAPBSET_READ, cap) == 1
            except SyscallError:  # EINVAL past the last capability the kernel knows
                break
            if present:
                prctl(PR_CAPBSET_DROP, cap, name="prctl(PR_CAPBSET_DROP)")
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    except SyscallError:
        pass  # kernels before 4.3 have no ambient set
    number = _CAPSET.get(machine())
    if number is not None:
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        syscall(number, ctypes.byref(header), ctypes.byref(data), name="capset")
    return True
