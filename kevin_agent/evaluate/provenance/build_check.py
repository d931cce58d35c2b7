"""The provenance decision made in the parent from a build's facts, before anything runs.

A compiled candidate whose own objects call what the policy denies, whose host code holds inline
assembly, or (under ``strict``) whose extension holds kernels its own text does not define, gets a
PROVENANCE rejection here and never reaches a GPU. The run-time profile stays as corroboration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.eval_modes import Policy
from kevin_agent.evaluate.provenance.facts import reasons
from kevin_agent.evaluate.provenance.policy import POLICY_RULES

ALLOWED_CALLS = ("tensor allocation and accessors (torch::empty*, data_ptr, sizes, TORCH_CHECK), the CUDA runtime "
                 "(launches, memory, streams, events, errors), the C++ runtime and libm")


def build_reasons(results: Sequence[Any], policy: Policy) -> list[str]:
    """Why ``policy`` rejects the builds of one candidate (``BuildResult``s); empty when it does
    not. A result without facts (a build made elsewhere, by an older recipe) adds nothing."""
    found: list[str] = []
    for result in results:
        facts = getattr(result, "facts", None)
        if not isinstance(facts, dict):
            continue
        found += reasons(facts, policy)
    return list(dict.fromkeys(found))


def build_message(policy: Policy, found: list[str]) -> str:
    """Feedback for the model: what its build holds that the rules do not allow, and what they do."""
    text = ("The kernel provenance check rejected your answer before it ran "
            f"({POLICY_RULES[policy]}): " + "; ".join(found) + ". "
            f"The C++/CUDA code of your extension may call {ALLOWED_CALLS}")
    if any("pybind11" in r or "Python C API" in r or "operator registration" in r for r in found):
        text += ("; the Python binding is generated from functions=[...]: name your functions there instead of "
                 "writing PYBIND11_MODULE, registering operators or calling Python")
    return text + "."


def build_rejection(results: Sequence[Any], policy: Policy, details: VerdictDetails) -> Optional[Verdict]:
    """The PROVENANCE rejection of a compiled candidate, or None when its builds pass ``policy``."""
    found = build_reasons(results, policy)
    if not found:
        return None
    record = details.provenance
    record.policy, record.ok, record.reasons = policy, False, found
    record.summary = f"provenance {policy}: rejected before it ran; {found[0][:200]}"
    return Verdict(Stage.PROVENANCE, False, build_message(policy, found), details)
