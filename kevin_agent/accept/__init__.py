"""Accepting a kernel: reviewable files next to the user's module, a commit of exactly them, undo.

``plan_accept`` (no writes) -> ``AcceptPlan.diff`` -> ``accept`` (write + commit) -> ``undo_last``.
Everything here needs GitPython only when committing; planning needs the standard library.
"""

from __future__ import annotations

from kevin_agent.accept.apply import AcceptResult, accept, preflight
from kevin_agent.accept.find import AcceptedKernel, find_accepted
from kevin_agent.accept.plan import AcceptPlan, plan_accept
from kevin_agent.accept.undo import undo_last, undo_target

__all__ = [
    "AcceptPlan",
    "AcceptResult",
    "AcceptedKernel",
    "accept",
    "find_accepted",
    "plan_accept",
    "preflight",
    "undo_last",
    "undo_target",
]
