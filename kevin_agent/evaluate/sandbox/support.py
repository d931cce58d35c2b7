"""What confinement this host offers, probed (never assumed) once per process."""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from kevin_agent.evaluate.sandbox import landlock, seccomp
from kevin_agent.evaluate.sandbox._sys import SyscallError, errno_text, machine
from kevin_agent.evaluate.sandbox.privileges import no_new_privs

_LANDLOCK_REASONS = {
    errno.ENOSYS: "the kernel has no Landlock (needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK)",
    errno.EOPNOTSUPP: "Landlock is built in but disabled at boot (add landlock to the lsm= kernel parameter)",
    errno.EPERM: "the Landlock system calls are refused (a container's seccomp profile?)",
}


@dataclass(frozen=True)
class SandboxSupport:
    """The host's confinement support. ``landlock_abi`` is 0 when Landlock is unavailable."""

    landlock_abi: int
    landlock_reason: str
    seccomp: bool
    seccomp_reason: str
    no_new_privs: bool  # already set on this process
    arch: str
    kernel: str

    @property
    def available(self) -> bool:
        """Both layers work: files (Landlock) and system calls (seccomp)."""
        return self.landlock_abi >= 1 and self.seccomp

    @property
    def reason(self) -> str:
        """Why confinement is incomplete, in one line ("" when available)."""
        parts = []
        if self.landlock_abi < 1:
            parts.append(f"landlock unavailable: {self.landlock_reason}")
        if not self.seccomp:
            parts.append(f"seccomp unavailable: {self.seccomp_reason}")
        return "; ".join(parts)

    def summary(self) -> str:
        """``landlock abi 7 + seccomp``, or ``none (landlock unavailable: ...)``."""
        layers = []
        if self.landlock_abi >= 1:
            layers.append(f"landlock abi {self.landlock_abi}")
        if self.seccomp:
            layers.append("seccomp")
        if self.available:
            return " + ".join(layers)
        if layers:
            return " + ".join(layers) + f" only ({self.reason})"
        return f"none ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unavailable(reason: str) -> SandboxSupport:
    """A support record for a host without any confinement (tests inject it; non-Linux hosts)."""
    release = os.uname().release if hasattr(os, "uname") else ""
    return SandboxSupport(0, reason, False, reason, False, machine(), release)


def probe() -> SandboxSupport:
    """Probe Landlock's ABI (landlock_create_ruleset(NULL, 0, VERSION)), seccomp filters, no_new_privs."""
    if not sys.platform.startswith("linux"):
        return unavailable(f"{sys.platform} is not Linux")
    try:
        abi, reason = landlock.abi_version(), ""
    except SyscallError as exc:
        abi, reason = 0, _LANDLOCK_REASONS.get(exc.errno, f"landlock_create_ruleset failed: {errno_text(exc.errno)}")
    ok, why = seccomp.available()
    return SandboxSupport(abi, reason, ok, why, no_new_privs(), machine(), os.uname().release)
