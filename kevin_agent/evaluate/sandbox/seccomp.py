"""A seccomp BPF filter: system calls a candidate never needs fail with EPERM, in every thread.

The filter first checks the architecture (a 32-bit or x32 system call from a 64-bit process could
otherwise slip past the numbers below) and kills the process on a mismatch. Then:

- always refused: ptrace and reading other processes' memory, io_uring (it could open sockets
  behind this filter's back), bpf, perf_event_open, userfaultfd, keyrings, mounts and namespaces
  (unshare, setns, clone with a CLONE_NEW* flag; clone3 answers ENOSYS so the C library falls back
  to clone, whose flags can be checked), personality, setrlimit and prlimit64 with a new limit,
  device nodes (mknod), and what only root could do (modules, reboot, kexec, swap, clock, hostname,
  raw I/O ports, chroot, quotas, acct, syslog), and every call that changes a file's metadata
  (mode, owner, times, extended attributes: Landlock does not cover them), and file watches
  (inotify, fanotify: Landlock does not check them, so a watch on the home would name the files
  opened and written there);
- in the candidate-facing layers (wherever file metadata is refused): System V shared memory,
  message queues and semaphores, and POSIX message queues (``shm*``, ``msg*``, ``sem*``,
  ``mq_*``). Each child already has an IPC namespace of its own; the filter keeps it empty too,
  so nothing is left for the namespace's end to clean up (CUDA's IPC between processes uses
  the driver's own handles and file descriptors, none of these);
- with ``network=False``: socket and socketpair (every family, AF_UNIX included);
- with ``processes=False``: execve, execveat, fork, vfork and clone without CLONE_THREAD (threads
  keep working; no process can be started, so none outlives the worker's process group).

x86_64 and aarch64 are supported; elsewhere ``build_filter`` raises ``UnsupportedArch``.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from dataclasses import dataclass

from kevin_agent.evaluate.sandbox._sys import SyscallError, machine, prctl, syscall

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_ACTION_AVAIL = 2
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_MODE_FILTER = 2
PR_SET_SECCOMP = 22

CLONE_THREAD = 0x00010000
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# BPF instruction classes used here
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_OFF_NR, _OFF_ARCH = 0, 4


def _arg_low(index: int) -> int:  # little-endian: the low 32 bits of args[index]
    return 16 + 8 * index


def _arg_high(index: int) -> int:
    return 20 + 8 * index


SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41, "socketpair": 53, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58,
        "clone": 56, "clone3": 435, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "process_madvise": 440, "pidfd_getfd": 438, "kcmp": 312, "setrlimit": 160, "prlimit64": 302,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "mount": 165, "umount2": 166, "pivot_root": 155, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "unshare": 272,
        "setns": 308, "personality": 135, "chroot": 161, "mknod": 133, "mknodat": 259,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "syslog": 103, "acct": 163,
        "quotactl": 179, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "uselib": 134,
        "open_by_handle_at": 304, "lookup_dcookie": 212, "vhangup": 153, "nfsservctl": 180,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93,
        "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
        "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466, "inotify_init": 253,
        "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300, "fanotify_mark": 301,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
        "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
        "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    },
    "aarch64": {
        "socket": 198, "socketpair": 199, "execve": 221, "execveat": 281, "clone": 220, "clone3": 435,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 272, "setrlimit": 164, "prlimit64": 261, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "mount": 40,
        "umount2": 39, "pivot_root": 41, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "unshare": 97, "setns": 268,
        "personality": 92, "chroot": 51, "mknodat": 33, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224,
        "swapoff": 225, "syslog": 116, "acct": 89, "quotactl": 60, "settimeofday": 170,
        "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "sethostname": 161,
        "setdomainname": 162, "open_by_handle_at": 265, "lookup_dcookie": 18, "vhangup": 58,
        "nfsservctl": 42, "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "fchownat": 54, "fchown": 55,
        "utimensat": 88, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
        "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466,
        "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262, "fanotify_mark": 263,
        "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
        "mq_getsetattr": 185, "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190,
        "semctl": 191, "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197,
    },
}

ALWAYS_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
    "setrlimit", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "umount2", "pivot_root", "fsopen",
    "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "unshare", "setns",
    "personality", "chroot", "mknod", "mknodat", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "iopl", "ioperm", "uselib", "open_by_handle_at", "lookup_dcookie", "vhangup", "nfsservctl",
)
# File metadata: Landlock does not cover it (mode, owner, times, extended attributes of any file
# the process can name, even one it cannot open). aarch64 has only the *at and f* forms.
METADATA_DENIED = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
    "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
    "fremovexattr", "setxattrat", "removexattrat",
)
# Watches: Landlock does not check inotify or fanotify marks, so a watch on a hidden folder (the
# home) would report the names of files opened and written there. Refused with the metadata calls.
WATCH_DENIED = ("inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark")
# System V and POSIX IPC: a segment or queue of another program of the same user could be read or
# written, and one made here would outlive the child. Refused with the metadata calls.
IPC_DENIED = (
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr",
)
NETWORK_DENIED = ("socket", "socketpair")
PROCESS_DENIED = ("execve", "execveat", "fork", "vfork")


class UnsupportedArch(Exception):
    """No system call table for this machine."""


@dataclass
class SeccompResult:
    arch: str
    instructions: int
    all_threads: bool  # TSYNC: every thread of the process got the filter
    denied: tuple[str, ...]  # the names refused with EPERM (clone rules aside)


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k & 0xFFFFFFFF)


def build_filter(*, network: bool, processes: bool, arch: str | None = None,
                 socket_families: tuple[int, ...] = (), metadata: bool = False) -> tuple[bytes, tuple[str, ...]]:
    """The BPF program (packed ``struct sock_filter`` array) and the names it denies.

    ``socket_families``: without ``network``, socket() of these address families stays allowed
    (socketpair never is). ``metadata``: the chmod, chown, utimes and xattr calls, file watches
    (inotify, fanotify) and System V / POSIX IPC stay allowed (the GPU worker's start-up layer,
    before any candidate code)."""
    arch = arch or machine()
    if arch not in SYSCALLS:
        raise UnsupportedArch(f"no system call table for {arch} (x86_64 and aarch64 are supported)")
    table = SYSCALLS[arch]
    eperm = RET_ERRNO | errno.EPERM
    prog = [
        _ins(_LD_W_ABS, _OFF_ARCH),
        _ins(_JEQ_K, AUDIT_ARCH[arch], jt=1, jf=0),
        _ins(_RET_K, RET_KILL_PROCESS),
        _ins(_LD_W_ABS, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 system calls share AUDIT_ARCH_X86_64 but carry this bit
        prog += [_ins(_JGE_K, X32_SYSCALL_BIT, jt=0, jf=1), _ins(_RET_K, RET_KILL_PROCESS)]
    families = tuple(socket_families) if not network else ()
    network_denied = [n for n in NETWORK_DENIED if not (families and n == "socket")]
    names = (list(ALWAYS_DENIED) + ([] if metadata else [*METADATA_DENIED, *WATCH_DENIED, *IPC_DENIED])
             + ([] if network else network_denied)
             + ([] if processes else list(PROCESS_DENIED)))
    denied = tuple(n for n in names if n in table)
    for name in denied:
        prog += [_ins(_JEQ_K, table[name], jt=0, jf=1), _ins(_RET_K, eperm)]
    if families:  # socket(family, ...): only the listed families
        block = [_ins(_LD_W_ABS, _arg_low(0))]
        block += [_ins(_JEQ_K, fam, jt=len(families) - i, jf=0) for i, fam in enumerate(families)]
        block += [_ins(_RET_K, eperm), _ins(_RET_K, RET_ALLOW)]
        prog += [_ins(_JEQ_K, table["socket"], jt=0, jf=len(block))] + block
    # clone3 passes its flags in memory, out of the filter's reach: ENOSYS makes libc use clone.
    prog += [_ins(_JEQ_K, table["clone3"], jt=0, jf=1), _ins(_RET_K, RET_ERRNO | errno.ENOSYS)]
    # prlimit64(pid, resource, new_limit, old_limit): reading is fine, a new limit is refused.
    prog += [
        _ins(_JEQ_K, table["prlimit64"], jt=0, jf=6),
        _ins(_LD_W_ABS, _arg_low(2)),
        _ins(_JEQ_K, 0, jt=0, jf=2),
        _ins(_LD_W_ABS, _arg_high(2)),
        _ins(_JEQ_K, 0, jt=1, jf=0),
        _ins(_RET_K, eperm),
        _ins(_RET_K, RET_ALLOW),
    ]
    # clone(flags, ...): never a new namespace; without processes, only threads.
    block = [_ins(_LD_W_ABS, _arg_low(0)), _ins(_JSET_K, CLONE_NEW_FLAGS, jt=0, jf=1), _ins(_RET_K, eperm)]
    if not processes:
        block += [_ins(_JSET_K, CLONE_THREAD, jt=1, jf=0), _ins(_RET_K, eperm)]
    block += [_ins(_RET_K, RET_ALLOW)]
    prog += [_ins(_JEQ_K, table["clone"], jt=0, jf=len(block))] + block
    prog += [_ins(_RET_K, RET_ALLOW)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog), denied


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp_nr() -> int:
    return {"x86_64": 317, "aarch64": 277}[machine()]


def available() -> tuple[bool, str]:
    """Whether filter mode with SECCOMP_RET_ERRNO works here; the reason when not."""
    if machine() not in SYSCALLS:
        return False, f"no system call table for {machine()}"
    action = ctypes.c_uint32(RET_ERRNO)
    try:
        syscall(_seccomp_nr(), SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(action), name="seccomp")
    except SyscallError as exc:
        return False, f"seccomp filters unavailable: {exc.strerror}"
    return True, ""


def install(*, network: bool, processes: bool, socket_families: tuple[int, ...] = (),
            metadata: bool = False) -> SeccompResult:
    """Install the filter on every thread (TSYNC). no_new_privs must already be set."""
    program, denied = build_filter(network=network, processes=processes, socket_families=socket_families,
                                   metadata=metadata)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    all_threads = True
    try:
        synced = syscall(_seccomp_nr(), SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog),
                         name="seccomp")
        if synced != 0:
            raise SyscallError(f"seccomp (thread {synced} could not be synchronised)", errno.EBUSY)
    except SyscallError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), name="prctl(PR_SET_SECCOMP)")
        all_threads = False
    return SeccompResult(machine(), len(program) // 8, all_threads, denied)
