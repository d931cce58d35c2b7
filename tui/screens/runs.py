"""Past runs from the store; Enter opens one on a run screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header

from kevin_agent.tui.formatting import fill_table, speedup_text
from kevin_agent.tui.messages import RunsListed

COLUMNS = ("run", "class", "status", "best", "candidates", "created")


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open run"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__(id="runs")
        self.run_ids: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "past runs"
        self.app.list_runs(self)  # type: ignore[attr-defined]

    def on_runs_listed(self, message: RunsListed) -> None:
        table = self.query_one(DataTable)
        self.run_ids = [run.run_id for run in message.runs]
        rows = [(run.run_id, run.class_name, run.status, speedup_text(run.best_speedup),
                 str(run.candidates), run.created.replace("T", " ")) for run in message.runs]
        fill_table(table, COLUMNS, rows, self.run_ids)
        if not message.runs:
            self.notify("No runs stored yet.", title="Past runs")
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        table = self.query_one(DataTable)
        if self.run_ids and table.cursor_row >= 0:
            self.app.open_run(self.run_ids[table.cursor_row])  # type: ignore[attr-defined]
