"""``confine(policy)``: restrict this process for good, before candidate code runs.

Order: no_new_privs; capabilities dropped; Landlock (files, TCP, abstract unix sockets, signals);
seccomp (system calls, every thread). Each step is irreversible and only ever adds restrictions,
so calling ``confine`` again (a stricter policy for the candidate phase) stacks a layer.

Threads: Landlock rules (ABI < 8) and capabilities belong to the calling thread and the threads
it starts later. Threads that exist when the first Landlock layer is applied keep full file
access, and native candidate code can run on any thread. Apply the first layer while the
process is single-threaded (``launch``: before torch is imported) and the report says
``all_threads``; seccomp always reaches every thread (TSYNC).
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

from kevin_agent.eval_modes import SANDBOX_MODES, SandboxMode
from kevin_agent.evaluate.sandbox import landlock, seccomp
from kevin_agent.evaluate.sandbox._sys import SyscallError, thread_count
from kevin_agent.evaluate.sandbox.limits import apply_limits
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy
from kevin_agent.evaluate.sandbox.privileges import drop_capabilities, set_no_new_privs
from kevin_agent.evaluate.sandbox.support import SandboxSupport, probe

Mode = SandboxMode  # defined once, in kevin_agent.eval_modes
MODES: tuple[str, ...] = SANDBOX_MODES


class SandboxUnavailable(RuntimeError):
    """``required`` mode and the host (or this process) cannot be confined; the message says why."""


@dataclass
class SandboxReport:
    """What ``confine`` applied. ``applied`` is the one-line summary for verdict details."""

    mode: SandboxMode
    applied: str  # "landlock abi 7 + seccomp", "none (reason)" or "off"
    landlock_abi: int = 0
    seccomp: bool = False
    no_new_privs: bool = False
    capabilities_dropped: bool = False
    threads: int = 1  # threads of the process when this layer was applied
    all_threads: bool = False  # every thread is under at least one Landlock layer
    layer: int = 0  # 1 for the first confine() of this process, 2 for the next...
    rules: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    denied_syscalls: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)  # "files up to 1024 MB"
    isolation: str = ""  # the launcher's PID namespace: "pid namespace, at most 1023 processes"

    @property
    def active(self) -> bool:
        return self.landlock_abi >= 1 or self.seccomp

    def details_line(self) -> str:
        """``sandbox: landlock abi 7 + seccomp`` / ``sandbox: none (reason)`` / ``sandbox: off``."""
        return f"sandbox: {self.applied}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_LAYERS: list[SandboxReport] = []
_FS_ALL_THREADS = False
_ISOLATION = ""


def set_isolation(summary: str) -> None:
    """What the launcher's namespaces gave this process (copied into every later report)."""
    global _ISOLATION
    _ISOLATION = summary


def current_report() -> Optional[SandboxReport]:
    """The last layer ``confine`` applied in this process (None before any call)."""
    return _LAYERS[-1] if _LAYERS else None


def _fail(mode: SandboxMode, message: str) -> None:
    if mode == "required":
        raise SandboxUnavailable(f"sandbox required but {message}")


def confine(policy: SandboxPolicy, mode: Mode = "auto", support: Optional[SandboxSupport] = None) -> SandboxReport:
    """Confine this process to ``policy``; irreversible.

    ``auto``: confine as far as the host allows, else report ``none (reason)``. ``required``:
    raise SandboxUnavailable unless both Landlock and seccomp are applied (the process must then
    not run candidate code). ``off``: change nothing. ``support`` overrides the probe (tests).
    """
    global _FS_ALL_THREADS
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        report = SandboxReport(mode, "off")
        _LAYERS.append(report)
        return report
    support = support if support is not None else probe()
    threads = thread_count()
    report = SandboxReport(mode, "", threads=threads, layer=len(_LAYERS) + 1, isolation=_ISOLATION)
    if not support.available:
        _fail(mode, support.reason)
    if support.landlock_abi < 1 and not support.seccomp:
        report.applied = f"none ({support.reason})"
        _LAYERS.append(report)
        return report
    try:
        set_no_new_privs()
        report.no_new_privs = True
        report.capabilities_dropped = drop_capabilities()
    except SyscallError as exc:
        _fail(mode, f"{exc.call} failed: {exc.strerror}")
        report.warnings.append(f"{exc.call} failed: {exc.strerror}")
    problems = _limits(report, policy)
    if support.landlock_abi >= 1 and report.no_new_privs:
        try:
            result = landlock.restrict(policy.landlock_rules(), support.landlock_abi, network=policy.network)
        except SyscallError as exc:
            problems.append(f"landlock failed: {exc.strerror}")
        else:
            report.landlock_abi = result.abi
            report.rules, report.skipped = result.rules, result.skipped
            _FS_ALL_THREADS = _FS_ALL_THREADS or result.all_threads or threads == 1
    if support.seccomp and report.no_new_privs:
        try:
            result_sc = seccomp.install(network=policy.network, processes=policy.processes,
                                        socket_families=policy.socket_families, metadata=policy.metadata)
        except (SyscallError, seccomp.UnsupportedArch) as exc:
            problems.append(f"seccomp failed: {exc}")
        else:
            report.seccomp = True
            report.denied_syscalls = list(result_sc.denied)
    report.all_threads = _FS_ALL_THREADS
    if problems:
        _fail(mode, "; ".join(problems))
    report.applied = _summary(report, support, problems)
    report.warnings += _warnings(report, policy, support)
    if policy.tmpdir:
        os.environ["TMPDIR"] = policy.tmpdir
        tempfile.tempdir = None  # recomputed from TMPDIR on next use
    _LAYERS.append(report)
    return report


def _limits(report: SandboxReport, policy: SandboxPolicy) -> list[str]:
    """Resource limits before seccomp (which then refuses to raise them); the problems."""
    try:
        report.limits = apply_limits(policy.max_file_bytes, policy.max_memory_bytes)
    except (OSError, ValueError) as exc:
        return [f"resource limits failed: {exc}"]
    return []


def _summary(report: SandboxReport, support: SandboxSupport, problems: list[str]) -> str:
    layers = []
    if report.landlock_abi:
        layers.append(f"landlock abi {report.landlock_abi}")
    if report.seccomp:
        layers.append("seccomp")
    why = "; ".join(problems + ([support.reason] if support.reason else []))
    if not layers:
        return f"none ({why})"
    return " + ".join(layers) + (f" only ({why})" if why else "")


def _warnings(report: SandboxReport, policy: SandboxPolicy, support: SandboxSupport) -> list[str]:
    found = []
    if report.landlock_abi and not report.all_threads:
        found.append(f"{report.threads} threads existed when the file rules were applied: only this thread and "
                     "the threads it starts are bound by them (confine before torch starts threads)")
    if 1 <= report.landlock_abi < 4 and not policy.network:
        found.append(f"landlock abi {report.landlock_abi} has no network rules (seccomp still refuses sockets)")
    if 1 <= report.landlock_abi < 6:
        found.append(f"landlock abi {report.landlock_abi} cannot scope signals: "
                     "other processes of this user can be signalled")
    found += [f"readable despite protection: {item}" for item in policy.exposed]
    return found


_SANDBOX_HELP = ("Candidate code runs in a sandbox: it may read the Python, torch and CUDA installs, "
                 "write only in its scratch directory, and may not open sockets, start processes, "
                 "change resource limits or trace other processes.")


def explain_denial(error: Union[BaseException, str], report: Optional[SandboxReport] = None) -> Optional[str]:
    """A sentence naming the sandbox when ``error`` (an exception or its text) is a refusal the
    sandbox produces (EACCES from Landlock, EPERM from seccomp); None otherwise or when no
    sandbox is active."""
    report = report if report is not None else current_report()
    if report is None or not report.active:
        return None
    if isinstance(error, OSError):
        code, name = error.errno, error.filename
    else:
        text = str(error)
        code = errno.EACCES if "[Errno 13]" in text else errno.EPERM if "[Errno 1]" in text else None
        name = None
    if code == errno.EACCES:
        what = f"access to {name} was denied" if name else "a file or network access was denied"
    elif code == errno.EPERM:
        what = "an operation was not permitted"
    else:
        return None
    return f"Blocked by the sandbox ({report.applied}): {what}. {_SANDBOX_HELP}"
