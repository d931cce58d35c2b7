"""Run state -> LSP: work-done progress, a log line per verdict, diagnostics, the final question.

``on_change`` is called on the run worker thread; everything it sends goes through the event loop
(``call_soon_threadsafe``), so the transport is only ever written from one thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from lsprotocol import types

from kevin_agent.events import Event, RunDone, RunFailed, VerdictReady
from kevin_agent.lsp.runs import RunState
from kevin_agent.progress import verdict_line
from kevin_agent.run_table import better_choice, tie_with
from kevin_agent.verdict_text import is_replayed, measured_label


class RunDisplay(Protocol):
    """What the reporter needs from the language server (``server.KevinServer``)."""

    @property
    def work_done_progress(self) -> Any: ...

    def call_in_loop(self, fn: Any, *args: Any) -> None: ...
    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None: ...
    def supports_progress(self) -> bool: ...
    def publish_run_diagnostics(self, uri: str) -> None: ...
    def refresh_lenses(self) -> None: ...
    async def conclude(self, state: RunState) -> None: ...

log = logging.getLogger(__name__)

ACCEPT_ACTION, DIFF_ACTION, DISCARD_ACTION = "Accept & commit", "Show diff", "Discard"
FINISHED = ("done", "cancelled", "failed", "accepted", "discarded")


@dataclass
class Snapshot:
    """The state as it was when the worker reported it (the worker keeps mutating ``state``)."""

    state: RunState
    status: str
    summary: str
    percentage: int
    event: Optional[Event]


def result_message(state: RunState) -> str:
    """'Kevin: 1.84x vs eager for X' (+ torch.compile and GPU when known, and which to keep when
    the kernel does not beat the faster of eager and torch.compile)."""
    assert state.best is not None
    details = state.best[1].details
    text = f"Kevin: {state.best_speedup:.2f}x vs eager for {state.class_name}"
    where = measured_label(details)
    if details.timing.speedup_vs_compile is not None:
        text += f" ({details.timing.speedup_vs_compile:.2f}x vs torch.compile"
        if where and is_replayed(details):
            text += f"; {where})"
        else:
            text += f" on {where})" if where else ")"
    elif where and is_replayed(details):
        text += f" ({where})"
    better = better_choice(details)
    if better == "tie":  # honest numbers: level within the timing noise is not a win
        text += f": a tie with {tie_with(details)}, within the timing noise"
    elif better != "kernel":  # a kernel is a win only over the faster of the two
        text += (": torch.compile is the better choice for this module" if better == "torch.compile"
                 else ": eager PyTorch is the better choice for this module")
    if details.provenance.own_share is not None:  # what ran on the GPU (provenance), and how close to the hardware
        text += f"; own kernels {details.provenance.own_share:.0%} of the GPU time"
        if details.timing.sol_fraction is not None:
            text += f", {details.timing.sol_fraction:.0%} of speed of light"
    if state.status == "cancelled":
        text += " (run cancelled)"
    return text


class Reporter:
    """Implements runs.RunListener for one server."""

    def __init__(self, server: RunDisplay) -> None:
        self.server = server
        self.tokens: dict[tuple[str, str], str] = {}  # run key -> progress token
        self.ready: dict[str, bool] = {}  # token -> begin sent
        self.pending_end: set[str] = set()
        self.runs_by_token: dict[str, tuple[str, str]] = {}

    # -- worker thread -------------------------------------------------------------------------

    def on_change(self, state: RunState, event: Optional[Event]) -> None:
        done = state.turn * 100 // max(state.turns, 1)
        snapshot = Snapshot(state, state.status, state.summary(), done, event)
        self.server.call_in_loop(self._apply, snapshot)

    # -- event loop ----------------------------------------------------------------------------

    def _apply(self, snap: Snapshot) -> None:
        state, event = snap.state, snap.event
        if isinstance(event, VerdictReady):
            self.server.log(f"Kevin {state.class_name} {verdict_line(event).strip()}")
        elif isinstance(event, RunFailed):
            self.server.log(f"Kevin {state.class_name}: run failed: {event.message}", types.MessageType.Error)
        elif isinstance(event, RunDone):
            self.server.log(f"Kevin {state.class_name}: {snap.summary}")
        self._progress(snap)
        self.server.publish_run_diagnostics(state.uri)
        self.server.refresh_lenses()
        if isinstance(event, (RunDone, RunFailed)) or (event is None and snap.status == "cancelled"):
            asyncio.ensure_future(self.server.conclude(state))

    def _progress(self, snap: Snapshot) -> None:
        if not self.server.supports_progress():
            return
        key = snap.state.key
        token = self.tokens.get(key)
        if snap.status in FINISHED:
            if token is not None:
                del self.tokens[key]
                self._end(token, snap.summary)
            return
        if token is None:
            token = f"kevin-{uuid.uuid4().hex[:12]}"
            self.tokens[key] = token
            self.runs_by_token[token] = key
            self.ready[token] = False
            asyncio.ensure_future(self._begin(token, snap))
            return
        if self.ready.get(token):
            self.server.work_done_progress.report(token, types.WorkDoneProgressReport(
                message=snap.summary, percentage=snap.percentage, cancellable=True))

    async def _begin(self, token: str, snap: Snapshot) -> None:
        try:
            await self.server.work_done_progress.create_async(token)
        except Exception as err:  # the client refused a progress: logs and diagnostics remain
            log.warning("work done progress refused: %s", err)
            return
        self.server.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=f"Kevin: {snap.state.class_name}", message=snap.state.summary(), cancellable=True,
            percentage=snap.percentage))
        self.ready[token] = True
        if token in self.pending_end:
            self.pending_end.discard(token)
            self._end(token, snap.state.summary())

    def _end(self, token: str, message: str) -> None:
        if not self.ready.get(token):
            self.pending_end.add(token)
            return
        self.ready.pop(token, None)
        self.runs_by_token.pop(token, None)
        self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))

    def run_of_token(self, token: str) -> Optional[tuple[str, str]]:
        return self.runs_by_token.get(str(token))
