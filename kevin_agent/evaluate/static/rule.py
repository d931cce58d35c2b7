"""Violation and Rule: the two types of the static checks (re-exported by ``static_checks``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from kevin_agent.evaluate.static.context import CandidateContext


@dataclass(frozen=True)
class Violation:
    rule: str  # rule id, e.g. "no-global-kernel"
    line: Optional[int]  # 1-based line in the candidate file, None when the whole file is at fault
    message: str  # an instruction the model can act on


REJECT, HINT = "reject", "hint"


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str  # one line for docs and listings
    check: Callable[[CandidateContext], Iterable[Violation]]
    kind: str = REJECT  # "reject": certain from the source, fails the candidate; "hint": feedback only
