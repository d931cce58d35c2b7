"""The diff review modal: what accepting writes; Accept & commit or Discard."""

from __future__ import annotations

from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class DiffScreen(ModalScreen[bool]):
    """Dismisses with True to commit, False to discard."""

    BINDINGS = [
        Binding("y", "commit", "Accept & commit"),
        Binding("n", "discard", "Discard"),
        Binding("escape", "discard", "Discard", show=False),
    ]

    def __init__(self, plan: object) -> None:
        super().__init__(id="diff")
        self.plan = plan

    def compose(self) -> ComposeResult:
        plan: Any = self.plan  # an AcceptPlan (the screen takes it untyped)
        files = ", ".join(plan.label(p) for p in sorted(plan.files))
        notes = "\n".join(plan.notes)
        with Vertical(id="diff-dialog"):
            title = Text(f"Accept {plan.candidate_id} of run {plan.run_id}?",
                         style="bold")
            yield Static(title + Text(f" Writes and commits: {files}"), id="diff-title")
            if notes:
                yield Static(notes, id="diff-notes")
            with VerticalScroll(id="diff-body"):
                yield Static(Syntax(plan.diff(), "diff", theme="ansi_dark",
                                    word_wrap=False))
            with Horizontal(id="diff-buttons"):
                yield Button("Accept & commit (y)", variant="success", id="commit", compact=True)
                yield Button("Discard (n)", variant="error", id="discard", compact=True)

    def on_mount(self) -> None:
        self.query_one("#diff-body").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "commit")

    def action_commit(self) -> None:
        self.dismiss(True)

    def action_discard(self) -> None:
        self.dismiss(False)
