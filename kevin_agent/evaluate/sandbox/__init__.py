"""OS-level confinement of processes that run model-written code (issue 14).

Landlock (files, TCP, abstract unix sockets, signals) and a seccomp filter (sockets, processes,
ptrace, resource limits, namespaces, ...) applied by the child itself before candidate code
runs: no root, no package, irreversible. Standard library and ctypes only.

API:
    probe() -> SandboxSupport                   what the host offers (Landlock ABI, seccomp)
    SandboxPolicy                               read-only / read-write / device / exec paths
    worker_policy(scratch, build_entries, ...)  the candidate phase of the GPU worker
    startup_policy(job_dir, cache_root, ...)    the GPU worker before torch starts threads
    compile_policy(build_dir, ...)              ninja / nvcc / g++ on model-written sources
    record_policy(scratch)                      the CPU child that records load_inline calls
    confine(policy, mode) -> SandboxReport      apply, in the child ("auto" | "required" | "off")
    launch_command(policy, argv, mode)          argv that confines, then runs a module or program
    check_sandbox() -> list[CheckResult]        attack a confined child; ``python -m`` prints it

docs/sandbox.md holds the threat model.
"""

from kevin_agent.evaluate.sandbox.enforce import (
    MODES,
    Mode,
    SandboxReport,
    SandboxUnavailable,
    confine,
    current_report,
    explain_denial,
)
from kevin_agent.evaluate.sandbox.policy import (
    SandboxPolicy,
    compile_policy,
    listing_policy,
    record_policy,
    startup_policy,
    system_read_paths,
    worker_policy,
)
from kevin_agent.evaluate.sandbox.support import SandboxSupport, probe, unavailable

__all__ = [
    "MODES", "Mode", "SandboxPolicy", "SandboxReport", "SandboxSupport", "SandboxUnavailable",
    "CheckResult", "check_sandbox", "compile_policy", "confine", "listing_policy", "current_report", "explain_denial",
    "launch_command", "probe", "record_policy", "startup_policy", "system_read_paths", "unavailable",
    "worker_policy",
]


def __getattr__(name: str):  # the self-check and launcher load only when asked for
    if name in ("CheckResult", "check_sandbox"):
        from kevin_agent.evaluate.sandbox import check

        return getattr(check, name)
    if name == "launch_command":
        from kevin_agent.evaluate.sandbox.launch import launch_command

        return launch_command
    raise AttributeError(name)
