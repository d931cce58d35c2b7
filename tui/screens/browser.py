"""The opening screen: every nn.Module class under the folder, its inputs and accepted kernel."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from kevin_agent.run_table import speedup_text
from kevin_agent.tui.discovery import ModuleEntry
from kevin_agent.tui.formatting import fill_table
from kevin_agent.tui.messages import ModulesScanned

COLUMNS = ("file", "class", "line", "inputs", "accepted")


class BrowserScreen(Screen):
    """Pick a module; Enter opens the run setup."""

    BINDINGS = [
        Binding("enter", "setup", "Set up run"),
        Binding("f5", "rescan", "Rescan"),
        Binding("r", "app.past_runs", "Past runs"),
        Binding("u", "app.undo", "Undo accept"),
    ]

    def __init__(self) -> None:
        super().__init__(id="browser")
        self.entries: list[ModuleEntry] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="modules", cursor_type="row", zebra_stripes=True)
        yield Static("Scanning for nn.Module classes…", id="module-note")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "modules"
        self.action_rescan()

    def action_rescan(self) -> None:
        self.app.scan_modules(self)  # type: ignore[attr-defined]  # KevinApp's

    def on_modules_scanned(self, message: ModulesScanned) -> None:
        self.entries = list(message.entries)
        table = self.query_one("#modules", DataTable)
        row = table.cursor_row
        rows = [_row(entry) for entry in self.entries]
        fill_table(table, COLUMNS, rows, [str(i) for i in range(len(rows))])
        if self.entries:
            table.move_cursor(row=min(row, len(self.entries) - 1))
        self._show_note(self.selected)
        table.focus()

    @property
    def selected(self) -> Optional[ModuleEntry]:
        table = self.query_one("#modules", DataTable)
        if not self.entries or table.cursor_row < 0:
            return None
        return self.entries[min(table.cursor_row, len(self.entries) - 1)]

    def _show_note(self, entry: Optional[ModuleEntry]) -> None:
        note = self.query_one("#module-note", Static)
        if entry is None:
            note.update("No nn.Module classes found here." if not self.entries else "")
        elif entry.drop_in_of:
            note.update(Text(f"{entry.module.name}: the accepted kernel of {entry.drop_in_of}", style="bold")
                        + Text(" (written by accept, not a module to optimize). Enter: go to the original."))
        elif entry.module.missing_inputs:
            note.update(Text("Needs example inputs: ", style="bold") + Text(entry.module.missing_inputs))
        elif entry.accepted_speedup is not None:
            note.update(Text(f"{entry.module.name}: accepted kernel, {entry.accepted_speedup:.2f}x vs "
                        f"eager (run {entry.accepted_run}). Enter: set up a new run."))
        else:
            note.update(Text(f"{entry.module.name} ({entry.label}:{entry.module.start_line}). "
                             "Enter: set up a run."))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_note(self.selected)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_setup()

    def action_setup(self) -> None:
        entry = self.selected
        if entry is None:
            return
        if entry.drop_in_of:
            self._go_to_original(entry)
            return
        if not entry.module.has_inputs:
            self.notify(entry.module.missing_inputs or "this module has no example inputs",
                        title="Example inputs needed", severity="warning")
            return
        from kevin_agent.tui.screens.setup import SetupScreen

        self.app.push_screen(SetupScreen(entry))

    def _go_to_original(self, entry: ModuleEntry) -> None:
        """A drop-in is not a module to optimize: move to the class it replaces."""
        original, replaced = entry.original_class, entry.drop_in_of or ""
        for index, other in enumerate(self.entries):
            if not other.drop_in_of and other.module.name == original and \
                    replaced.partition("::")[0].endswith(other.path.name):
                self.query_one("#modules", DataTable).move_cursor(row=index)
                return
        self.notify(f"{entry.module.name} is the accepted kernel of {entry.drop_in_of}; set up runs "
                    "on the original module", title="Accepted kernel")


def _row(entry: ModuleEntry) -> tuple[str, ...]:
    """file, class, line, inputs, accepted: a drop-in says whose kernel it is."""
    if entry.drop_in_of:
        return (entry.label, entry.module.name, str(entry.module.start_line), "-",
                f"kernel of {entry.original_class}")
    return (entry.label, entry.module.name, str(entry.module.start_line),
            "ok" if entry.module.has_inputs else "missing", speedup_text(entry.accepted_speedup))
