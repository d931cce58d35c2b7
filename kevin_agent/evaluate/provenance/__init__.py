"""Kernel provenance: judge what ran on the GPU, not how the source is spelled (docs/provenance.md).

* ``symbols.list_kernels(so)`` -> the kernels built into a candidate's extension (build step).
* ``profile.profile_forward(fn, args, device)`` -> the GPU work of one forward call (worker; torch).
* ``policy.judge(activities, own, reference_launches, policy)`` -> ``ProvenanceResult``.
* ``facts.gather`` (confined child) -> a build's facts; ``build_check.build_rejection`` decides
  them in the parent before any GPU stage (imports allow-list, ``__global__`` origins, host asm).

Everything but ``profile`` is standard library only and runs without a GPU.
"""

from kevin_agent.evaluate.provenance.attribution import KernelRow, OwnKernels, attribute, kernel_rows
from kevin_agent.evaluate.provenance.policy import (
    DEFAULT_POLICY,
    PARTIAL,
    POLICIES,
    POLICY_PROMPTS,
    STRICT,
    STRICT_COPY_FLOOR_MS,
    STRICT_COPY_SHARE,
    STRICT_FILL_FLOOR_MS,
    STRICT_FILL_SHARE,
    ForeignSummary,
    ProvenanceResult,
    judge,
    kernel_table,
    profile_feedback,
)
from kevin_agent.evaluate.provenance.symbols import ExtensionKernels, list_kernels
from kevin_agent.evaluate.provenance.trace import (
    FORWARD_ANNOTATION,
    KernelActivity,
    ProfileTrace,
    activities_from_chrome_trace,
    launch_count,
)

__all__ = [
    "DEFAULT_POLICY", "ExtensionKernels", "FORWARD_ANNOTATION", "ForeignSummary", "KernelActivity", "KernelRow",
    "OwnKernels", "PARTIAL", "POLICIES", "POLICY_PROMPTS", "ProfileTrace", "ProvenanceResult", "STRICT",
    "STRICT_COPY_FLOOR_MS", "STRICT_COPY_SHARE", "STRICT_FILL_FLOOR_MS", "STRICT_FILL_SHARE",
    "activities_from_chrome_trace", "attribute", "judge", "kernel_rows",
    "kernel_table", "launch_count", "list_kernels", "profile_feedback",
]
