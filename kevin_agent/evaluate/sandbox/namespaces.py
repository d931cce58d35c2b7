"""A private PID namespace (inside an unprivileged user namespace) for a confined child.

Every process the child starts, ``setsid`` daemons and double forks included, lives in that
namespace, and the kernel kills them all when its first process (the child) ends. The number of
processes and threads is capped by the namespace's own ``pid_max`` (Linux 6.14 and later; 301 is
the smallest value the kernel takes), with RLIMIT_NPROC as the fallback on older kernels (it
counts per user, and never applies to root). A fresh ``/proc`` is mounted where the host
allows, so the child sees only its own processes and ``getpid()`` matches ``/proc/self``.

The same mount namespace hides the user's folders (``SandboxPolicy.hidden``: the home, the
protected paths, /tmp and the other roots of user data): each is covered by an empty read-only
tmpfs, and every granted path inside it is bound back. Landlock already refuses their content;
this also takes away their *existence* (``stat``, ``__has_include``, an ``open`` that fails with
EACCES instead of ENOENT), which Landlock does not cover.

Order (``launch``): ``unshare_namespaces()`` in the single-threaded launcher, ``fork()``, then
``become_init(max_processes)`` in the child, before the Landlock and seccomp layers (they refuse
mounts and namespaces afterwards). Standard library and ctypes only.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from kevin_agent.evaluate.sandbox._sys import SyscallError, errno_text, libc, prctl

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000  # System V IPC objects and POSIX message queues of its own: none of the host's
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    0x1, 0x2, 0x4, 0x8, 0x20, 0x1000, 0x4000, 0x40000)
MNT_DETACH = 0x2
PID_MAX_MIN = 301  # the kernel refuses a smaller pid_max


@dataclass
class Isolation:
    """What the namespaces gave: ``pid_namespace``, a process cap (``max_processes``, 0: none),
    how it is enforced (``"pid_max"`` or ``"rlimit"``), a private ``/proc``, and why not."""

    pid_namespace: bool = False
    max_processes: int = 0
    how: str = ""
    proc_mounted: bool = False
    hidden: tuple[str, ...] = ()  # folders covered by an empty tmpfs (granted paths bound back)
    problems: tuple[str, ...] = ()

    def summary(self) -> str:
        """``pid namespace, at most 512 processes, 3 folders hidden`` / ``no pid namespace (reason)``."""
        if not self.pid_namespace:
            return "no pid namespace (" + "; ".join(self.problems or ("not asked for",)) + ")"
        cap = f"at most {self.max_processes} processes" if self.max_processes else "no process limit"
        hidden = f", {len(self.hidden)} folders hidden" if self.hidden else ""
        return f"pid namespace, {cap}" + ("" if self.proc_mounted else ", host /proc") + hidden


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def unshare_namespaces() -> str:
    """Enter a new user, PID, mount and IPC namespace (the PID one takes effect for the next
    child), mapping this process's uid and gid to themselves. The IPC namespace keeps the
    candidate away from the host's shared-memory segments, semaphores and message queues, and
    whatever it makes there goes with it. "" on success, else the reason."""
    uid, gid = os.getuid(), os.getgid()
    if libc().unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC) != 0:
        return f"unshare(user, pid, mount, ipc) failed: {errno_text(ctypes.get_errno())}"
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        return f"cannot map the user namespace's ids: {exc.strerror}"
    return ""


def become_init(max_processes: int, parent: int, hidden: Sequence[str] = (),
                granted: Sequence[str] = ()) -> Isolation:
    """In the first child after ``unshare_namespaces``: die with ``parent``, mount a private
    /proc, hide the ``hidden`` folders (but the ``granted`` paths inside them), cap the number of
    processes. Returns what applied (never raises)."""
    iso = Isolation(pid_namespace=os.getpid() == 1)
    problems = [] if iso.pid_namespace else ["the child is not the namespace's first process"]
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except SyscallError as exc:
        problems.append(f"PR_SET_PDEATHSIG failed: {exc.strerror}")
    if os.getppid() != 0 and os.getppid() != parent:  # the launcher died before the prctl
        os._exit(137)
    iso.proc_mounted, why = _mount_proc()
    if why:
        problems.append(why)
    elif hidden:
        done, failures = hide_folders(hidden, granted)
        iso.hidden = tuple(done)
        problems += failures
    if max_processes and iso.pid_namespace:
        iso.max_processes, iso.how, why = _cap_processes(max_processes)
        if why:
            problems.append(why)
    iso.problems = tuple(problems)
    return iso


def _mount_proc() -> tuple[bool, str]:
    lib = libc()
    if lib.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False, f"cannot make mounts private: {errno_text(ctypes.get_errno())}"
    if lib.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return False, f"cannot mount a private /proc: {errno_text(ctypes.get_errno())}"
    return True, ""


def _inside(outer: str, inner: str) -> bool:
    """``inner`` is ``outer`` or lies beneath it (both absolute, normalised)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def hide_folders(hidden: Sequence[str], granted: Sequence[str]) -> tuple[list[str], list[str]]:
    """Cover each folder of ``hidden`` with an empty read-only tmpfs and bind back every path of
    ``granted`` inside it, so only those exist there. A folder inside a granted path (exposed)
    or inside one already covered is left as it is. Only in a private mount namespace. Returns
    (the folders covered, one line per folder that could not be)."""
    done: list[str] = []
    problems: list[str] = []
    for folder in sorted(dict.fromkeys(hidden), key=len):
        if any(_inside(g, folder) for g in granted) or any(_inside(d, folder) for d in done):
            continue
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        inside = [g for g in granted if _inside(folder, g)]
        keep = [g for g in inside if not any(o != g and _inside(o, g) for o in inside)]  # outermost only
        why = _cover(folder, sorted(dict.fromkeys(keep)))
        if why:
            problems.append(f"{folder} not hidden: {why}")
        else:
            done.append(folder)
    return done, problems


def _mount(source: bytes | None, target: str, kind: bytes | None, flags: int, data: bytes | None = None) -> str:
    """'' when mount(2) succeeded, else what failed."""
    if libc().mount(source, target.encode(), kind, flags, data) != 0:
        return f"mount {target}: {errno_text(ctypes.get_errno())}"
    return ""


def _cover(folder: str, keep: Sequence[str]) -> str:
    """Mount an empty tmpfs on ``folder``, bind each path of ``keep`` back (through descriptors
    opened before the cover), then make the tmpfs read-only. '' on success; on failure the
    cover is taken away again and the reason returned."""
    held: list[tuple[str, int]] = []
    try:
        for path in keep:
            try:
                held.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
            except OSError:
                continue  # gone since the policy was made: nothing to keep
        why = _mount(b"tmpfs", folder, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=1m,mode=0755")
        if why:
            return why
        for path, fd in held:
            why = _bind_back(path, fd)
            if why:
                libc().umount2(folder.encode(), MNT_DETACH)
                return why
        flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        why = _mount(None, folder, None, flags)
        if why:
            libc().umount2(folder.encode(), MNT_DETACH)
        return why
    finally:
        for _, fd in held:
            os.close(fd)


def _bind_back(path: str, fd: int) -> str:
    """Make ``path`` in the fresh tmpfs (a folder, or an empty file for a file) and bind the
    original, held open as ``fd``, onto it."""
    try:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    except OSError as exc:
        return f"cannot make {path} in the cover: {exc.strerror}"
    return _mount(f"/proc/self/fd/{fd}".encode(), path, None, MS_BIND | MS_REC)


def _cap_processes(limit: int) -> tuple[int, str, str]:
    """(cap, how, problem): the namespace's pid_max (pids 1..pid_max-1), else RLIMIT_NPROC."""
    pid_max = max(PID_MAX_MIN, limit + 1)
    try:
        _write("/proc/sys/kernel/pid_max", str(pid_max))
        return pid_max - 1, "pid_max", ""
    except OSError as exc:
        why = f"pid_max of the namespace cannot be set ({exc.strerror}; Linux 6.14 or later)"
    if os.getuid() == 0:
        return 0, "", why + "; RLIMIT_NPROC never applies to root"
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        new = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (new, new))
    except (OSError, ValueError) as exc:
        return 0, "", why + f"; RLIMIT_NPROC failed: {exc}"
    return new, "rlimit", why + "; RLIMIT_NPROC counts every process of this user"
