"""The evaluation's two named modes, defined once: the provenance policy and the sandbox mode.

Each is a ``Literal`` type, the tuple of its values and one parser. Settings are parsed where they
are resolved (flags, environment, config file, editor settings, a stored run, a worker's job);
past that point code takes the typed value and never checks it again. Standard library only: the
GPU worker imports it.
"""

from __future__ import annotations

from typing import Literal, TypeVar

Policy = Literal["strict", "partial"]
STRICT: Policy = "strict"  # pure CUDA: every compute kernel is the candidate's own (Kevin's setting)
PARTIAL: Policy = "partial"  # KernelBench's rule: library and PyTorch kernels allowed beside own ones
POLICIES: tuple[Policy, ...] = (STRICT, PARTIAL)
DEFAULT_POLICY: Policy = STRICT

SandboxMode = Literal["auto", "required", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "off")  # sandbox.enforce.MODES is this
DEFAULT_SANDBOX: SandboxMode = "auto"  # confine when the kernel can, say so when it cannot

_T = TypeVar("_T", bound=str)


def _one_of(value: object, allowed: tuple[_T, ...]) -> _T:
    for choice in allowed:
        if value == choice:
            return choice
    raise ValueError(f"expected one of {', '.join(allowed)}")


def parse_policy(value: object) -> Policy:
    """``value`` as a Policy (exactly one of POLICIES); ValueError naming the allowed values."""
    return _one_of(value, POLICIES)


def parse_sandbox_mode(value: object) -> SandboxMode:
    """``value`` as a SandboxMode (exactly one of SANDBOX_MODES); ValueError naming the allowed values."""
    return _one_of(value, SANDBOX_MODES)


def choices_metavar(allowed: tuple[str, ...]) -> str:
    """How a flag's help shows its values, e.g. ``{strict,partial}``."""
    return "{" + ",".join(allowed) + "}"
