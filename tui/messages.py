"""What the workers report back to the interface: dataclass Messages (posted thread-safely)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from textual.message import Message

from kevin_agent.events import Event


@dataclass
class ModulesScanned(Message):
    """The browser's module list is ready."""

    entries: list[Any]  # discovery.ModuleEntry


@dataclass
class RunEventArrived(Message):
    """A core event of the live run (RunStarted, VerdictReady, ...)."""

    event: Event


@dataclass
class RunFinished(Message):
    """The session returned: its stored record (status done / cancelled / failed)."""

    record: Any  # run_record.RunRecord


@dataclass
class RunResumed(Message):
    """A stored run about to be continued: its candidates so far, before the new events."""

    record: Any  # run_record.RunRecord


@dataclass
class RunLoaded(Message):
    """A past run read from the store, to show on a run screen."""

    record: Any


@dataclass
class RunsListed(Message):
    """The store's runs, newest first."""

    runs: list[Any]  # run_record.RunSummary


@dataclass
class AcceptPlanned(Message):
    """What accepting would write: show the diff and ask."""

    plan: Any  # accept.AcceptPlan


@dataclass
class AcceptCommitted(Message):
    """The kernel's files were written and committed."""

    sha: Optional[str]
    subject: str
    paths: list[str]


@dataclass
class UndoProposed(Message):
    """The commit undo would revert: ask before reverting it."""

    sha: str
    subject: str


@dataclass
class UndoDone(Message):
    """The latest kevin-agent commit was reverted by ``sha``."""

    sha: str
