"""Landlock (Linux >= 5.13): unprivileged, irreversible file, network and IPC restrictions.

Constants from the kernel's ``include/uapi/linux/landlock.h``. Every access right the running
kernel's ABI knows is *handled*, so whatever a rule does not grant is denied. Rights of ABIs newer
than this module knows are left alone (not handled: allowed as before those ABIs existed).

ABI  kernel  what it added (and what this module does with it)
1    5.13    file system rights (execute, read, write, list, make_*, remove_*)
2    5.19    REFER: rename/link across directories (granted only inside writable trees)
3    6.2     TRUNCATE (granted only inside writable trees and on device nodes)
4    6.7     TCP bind/connect (handled, no rule: every TCP bind and connect is denied)
5    6.10    IOCTL_DEV: ioctl on device nodes (granted only on the policy's device nodes)
6    6.12    scopes: abstract unix sockets and signals to processes outside the domain
7    6.15    audit logging flags (nothing to handle)
8    later   TSYNC: restrict every thread of the process at once (used when offered)
9    later   RESOLVE_UNIX: connecting to pathname unix sockets (granted inside writable trees)
10   later   UDP bind/connect/send (handled like TCP)
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kevin_agent.evaluate.sandbox._sys import SyscallError, errno_text, syscall

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
FS_RESOLVE_UNIX = 1 << 16  # ABI 9

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
NET_BIND_UDP = 1 << 2  # ABI 10
NET_CONNECT_SEND_UDP = 1 << 3

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

KNOWN_ABI = 10

_FS_V1 = (1 << 13) - 1

# Rights that apply to a file (not a directory); the kernel refuses others on a file rule.
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

READ = FS_READ_FILE | FS_READ_DIR
EXECUTE = FS_EXECUTE
# Writable trees: everything but executing, device nodes (root could mknod a disk), sockets, fifos.
WRITE = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SYM
         | FS_REFER | FS_TRUNCATE | FS_RESOLVE_UNIX)
WRITE_EXISTING = FS_WRITE_FILE | FS_TRUNCATE  # write files that exist; create or remove nothing
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV | FS_READ_DIR


def fs_rights(abi: int) -> int:
    """Every file-system right the given ABI handles."""
    rights = _FS_V1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    if abi >= 9:
        rights |= FS_RESOLVE_UNIX
    return rights


def net_rights(abi: int) -> int:
    rights = 0
    if abi >= 4:
        rights |= NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 10:
        rights |= NET_BIND_UDP | NET_CONNECT_SEND_UDP
    return rights


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The running kernel's Landlock ABI; raises SyscallError (ENOSYS: not built in,
    EOPNOTSUPP: disabled at boot, EPERM: refused by a container's seccomp profile)."""
    return syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION, name="landlock_create_ruleset")


@dataclass
class PathRule:
    path: str
    access: int  # rights wanted; masked to what the ABI handles and what the file type takes


@dataclass
class LandlockResult:
    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    all_threads: bool  # TSYNC was used (ABI >= 8)
    rules: list[str] = field(default_factory=list)  # "PATH (rights)" for each rule added
    skipped: list[str] = field(default_factory=list)  # "PATH: reason" for paths left out


def rights_text(access: int) -> str:
    names = []
    if access & FS_READ_FILE:
        names.append("read")
    if access & FS_READ_DIR:
        names.append("list")
    if access & FS_WRITE_FILE:
        names.append("write")
    if access & FS_EXECUTE:
        names.append("exec")
    if access & FS_MAKE_REG:
        names.append("create")
    if access & FS_IOCTL_DEV:
        names.append("ioctl")
    return "+".join(names) or "none"


def restrict(rules: Sequence[PathRule], abi: int, *, network: bool, scope: bool = True) -> LandlockResult:
    """Create a ruleset for ``abi``, add ``rules``, and restrict the calling thread (every thread
    with ABI >= 8). ``network=False`` denies TCP (and UDP where handled); ``scope`` confines
    abstract unix sockets and signals to this domain. Raises SyscallError if any step fails."""
    abi = min(abi, KNOWN_ABI)
    handled_fs = fs_rights(abi)
    handled_net = 0 if network else net_rights(abi)
    scoped = scopes(abi) if scope else 0
    if network:
        scoped &= ~SCOPE_ABSTRACT_UNIX_SOCKET
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    fd = syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0, name="landlock_create_ruleset")
    result = LandlockResult(abi, handled_fs, handled_net, scoped, all_threads=False)
    try:
        for rule in _merged(rules):
            _add_path_rule(fd, rule, handled_fs, result)
        flags = RESTRICT_SELF_TSYNC if abi >= 8 else 0
        try:
            syscall(SYS_RESTRICT_SELF, fd, flags, name="landlock_restrict_self")
        except SyscallError as exc:
            if not flags or exc.errno != errno.EINVAL:
                raise
            flags = 0
            syscall(SYS_RESTRICT_SELF, fd, 0, name="landlock_restrict_self")
        result.all_threads = bool(flags)
    finally:
        os.close(fd)
    return result


def _merged(rules: Iterable[PathRule]) -> list[PathRule]:
    """One rule per path, with the union of the rights asked for it, in first-seen order."""
    merged: dict[str, int] = {}
    for rule in rules:
        merged[rule.path] = merged.get(rule.path, 0) | rule.access
    return [PathRule(path, access) for path, access in merged.items()]


def _add_path_rule(ruleset_fd: int, rule: PathRule, handled: int, result: LandlockResult) -> None:
    try:
        fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        result.skipped.append(f"{rule.path}: {exc.strerror}")
        return
    try:
        access = rule.access & handled
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FILE_RIGHTS
        if not access:
            result.skipped.append(f"{rule.path}: no right applies")
            return
        attr = _PathBeneathAttr(access, fd)
        try:
            syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, ctypes.byref(attr), 0, name="landlock_add_rule")
        except SyscallError as exc:
            if exc.errno == errno.EBADFD or exc.errno == errno.EBADF:
                result.skipped.append(f"{rule.path}: {errno_text(exc.errno)}")
                return
            raise SyscallError(f"landlock_add_rule({rule.path})", exc.errno) from exc
        result.rules.append(f"{rule.path} ({rights_text(access)})")
    finally:
        os.close(fd)
