"""Past runs from the store; Enter opens one on a run screen, `c` continues an unfinished one."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header

from kevin_agent.run_table import best_text
from kevin_agent.tui.formatting import fill_table
from kevin_agent.tui.messages import RunsListed

COLUMNS = ("run", "class", "status", "best", "candidates", "created")


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open run"),
        Binding("c", "resume", "Continue run"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__(id="runs")
        self.run_ids: list[str] = []
        self.statuses: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "past runs"
        self.app.list_runs(self)  # type: ignore[attr-defined]  # KevinApp's

    def on_runs_listed(self, message: RunsListed) -> None:
        table = self.query_one(DataTable)
        self.run_ids = [run.run_id for run in message.runs]
        self.statuses = [run.status for run in message.runs]
        rows = [(run.run_id, run.class_name, run.status, best_text(run),
                 str(run.candidates), run.created.replace("T", " ")) for run in message.runs]
        fill_table(table, COLUMNS, rows, self.run_ids)
        if not message.runs:
            self.notify("No runs stored yet.", title="Past runs")
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def _selected(self) -> int | None:
        table = self.query_one(DataTable)
        if self.run_ids and 0 <= table.cursor_row < len(self.run_ids):
            return table.cursor_row
        return None

    def action_open(self) -> None:
        row = self._selected()
        if row is not None:
            self.app.open_run(self.run_ids[row])  # type: ignore[attr-defined]  # KevinApp's

    def action_resume(self) -> None:
        """Continue an unfinished run (cancelled, failed, or left running by a killed process)."""
        row = self._selected()
        if row is None:
            return
        run_id = self.run_ids[row]
        if self.statuses[row] == "done":
            self.notify(f"Run {run_id} is already done: Enter opens it.", title="Continue run")
            return
        self.app.resume_run(run_id)  # type: ignore[attr-defined]  # KevinApp's
