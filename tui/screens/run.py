"""The live run: candidates table, speedup plot, progress; also shows past runs from the store."""

from __future__ import annotations

import threading
from typing import Any, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from kevin_agent.data import Candidate, Verdict
from kevin_agent.events import CandidateGenerated, RunFailed, VerdictReady
from kevin_agent.run_record import RunRecord
from kevin_agent.runs.request import RunRequest
from kevin_agent.runs.state import RunView
from kevin_agent.tui.formatting import ROW_COLUMNS, ROW_WIDTHS, row_cells
from kevin_agent.tui.messages import RunEventArrived, RunFinished, RunResumed
from kevin_agent.tui.widgets import RunProgress, SpeedupPlot

ACTIVE = ("starting", "running", "cancelling")


class RunScreen(Screen):
    """Starts a run on mount (``settings`` given) or shows a stored one (``record`` given)."""

    BINDINGS = [
        Binding("enter", "details", "Details"),
        Binding("c", "cancel_run", "Cancel run"),
        Binding("a", "accept", "Accept & commit"),
        Binding("d", "discard", "Discard"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, *, entry: Any = None, request: Optional[RunRequest] = None,
                 record: Optional[RunRecord] = None) -> None:
        super().__init__(id="run")
        self.entry, self.request = entry, request
        self.view = RunView.from_record(record) if record is not None else RunView(
            turns=request.turns if request is not None else 1)
        self.shown: set[str] = set()  # candidate ids with a table row
        self.cancelling = False
        self.cancel_event = threading.Event()
        self._record = record

    @property
    def run_id(self) -> str:
        return self.view.run_id

    @property
    def status(self) -> str:
        return "cancelling" if self.cancelling and self.view.active else self.view.status

    @property
    def rows(self) -> dict[str, tuple[Candidate, Optional[Verdict]]]:
        return self.view.rows

    # -- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield RunProgress(id="progress")
        yield DataTable(id="candidates", cursor_type="row", zebra_stripes=True)
        yield Static("", id="conclusion")
        yield SpeedupPlot(max(self.view.turns, 1), id="plot")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#candidates", DataTable)
        self.columns = [table.add_column(name, width=width)
                        for name, width in zip(ROW_COLUMNS, ROW_WIDTHS)]
        if self._record is not None:
            self.load_record(self._record)
        else:
            self.app.start_run(self, self.request, self.cancel_event)  # type: ignore[attr-defined]  # KevinApp's
        self._refresh_progress()
        table.focus()

    @property
    def running(self) -> bool:
        return self.status in ACTIVE

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_run":  # hidden, not dimmed, once the run has finished: nothing to cancel
            return self.running
        if action in ("discard", "back"):
            return None if self.running else True
        if action in ("accept", "details"):
            return True if self.selected is not None else None
        return True

    # -- state ---------------------------------------------------------------------------------

    @property
    def selected(self) -> Optional[tuple[Candidate, Optional[Verdict]]]:
        if not self.rows:
            return None
        table = self.query_one("#candidates", DataTable)
        keys = list(self.rows)
        return self.rows[keys[min(max(table.cursor_row, 0), len(keys) - 1)]]

    def _show_row(self, candidate: Candidate, verdict: Optional[Verdict]) -> None:
        table = self.query_one("#candidates", DataTable)
        cells = row_cells(candidate, verdict)
        if candidate.id in self.shown:
            for column, value in zip(self.columns, cells):
                table.update_cell(candidate.id, column, value)
        else:
            table.add_row(*cells, key=candidate.id)
            self.shown.add(candidate.id)
        if verdict is not None:
            speedup = verdict.speedup if verdict.counts_as_best else 0.0
            self.query_one(SpeedupPlot).set_point(candidate.trajectory, candidate.turn, speedup)
        self.refresh_bindings()

    def _refresh_progress(self) -> None:
        v = self.view
        tokens = sum(v.tokens_by_turn.values())
        status = v.waiting if v.waiting and self.status == "running" else self.status
        self.query_one(RunProgress).show(status, v.turn, max(v.turns, 1), tokens, v.compiling, v.timing)
        name = v.class_name or (self.entry.module.name if self.entry is not None else "")
        self.sub_title = " · ".join(p for p in (name, v.run_id, self.status) if p)

    def load_record(self, record: RunRecord) -> None:
        """Show a stored run (past run, or the live run once it returned)."""
        self._record = record
        live_tokens = self.view.tokens_by_turn
        self.view = RunView.from_record(record)
        self.view.tokens_by_turn = live_tokens or self.view.tokens_by_turn
        self.query_one(SpeedupPlot).turns = max(self.view.turns, 1)
        for candidate, verdict in record.candidates:
            self._show_row(candidate, verdict)
        from kevin_agent.run_table import conclude
        from kevin_agent.verdict_text import replay_note

        text = conclude(record).text + "".join(f"\nNote: {note}." for note in record.notes)
        if record.status == "failed" and record.error:
            text = f"Run failed: {record.error}"
        note = replay_note(record, text)
        if note:
            text += f"\n{note}"
        self.query_one("#conclusion", Static).update(Text(text))  # plain text: no markup from errors
        self._refresh_progress()
        self.refresh_bindings()

    def mark_failed(self, message: str) -> None:
        """The run could not start or crashed outside the session (the app notified already)."""
        self.view.apply(RunFailed(self.view.run_id, message))
        self.query_one("#conclusion", Static).update(Text(f"Run failed: {message}"))
        self._refresh_progress()
        self.refresh_bindings()

    # -- events from the worker ----------------------------------------------------------------

    def on_run_event_arrived(self, message: RunEventArrived) -> None:
        message.stop()
        event = message.event
        self.view.apply(event)
        if isinstance(event, (CandidateGenerated, VerdictReady)):
            self._show_row(*self.view.rows[event.candidate.id])
        elif isinstance(event, RunFailed):
            self.notify(event.message, title="Run failed", severity="error", timeout=10, markup=False)
        self._refresh_progress()

    def on_run_resumed(self, message: RunResumed) -> None:
        message.stop()
        self.load_record(message.record)
        self.notify(f"Continuing run {message.record.run_id} ({message.record.status}); finished "
                    "turns are kept.", title="Resumed")

    def on_run_finished(self, message: RunFinished) -> None:
        message.stop()
        self.load_record(message.record)
        if message.record.status == "cancelled":
            self.notify(f"Run {self.run_id} cancelled; finished work is kept in the store.",
                        title="Cancelled")

    # -- actions -------------------------------------------------------------------------------

    def action_cancel_run(self) -> None:
        if self.running:
            self.cancel_event.set()
            self.cancelling = True
            self._refresh_progress()
            self.refresh_bindings()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_details()

    def action_details(self) -> None:
        chosen = self.selected
        if chosen is None:
            return
        from kevin_agent.tui.screens.candidate import CandidateScreen

        self.app.push_screen(CandidateScreen(self.run_id, chosen[0], chosen[1]))

    def action_accept(self) -> None:
        chosen = self.selected
        if chosen is not None and self.run_id:
            self.app.request_accept(self.run_id, chosen[0].id)  # type: ignore[attr-defined]  # KevinApp's

    def action_discard(self) -> None:
        if not self.running:
            self.notify(f"Nothing written; run {self.run_id} stays in the store.", title="Discarded")
            self.app.pop_screen()

    def action_back(self) -> None:
        if not self.running:
            self.app.pop_screen()
