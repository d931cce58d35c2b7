"""One candidate: the model's summary, the verdict (or compiler errors), the code highlighted."""

from __future__ import annotations

from typing import Optional

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from kevin_agent.data import Candidate, Verdict
from kevin_agent.safe_text import terminal_safe
from kevin_agent.tui.formatting import cuda_sources, verdict_label
from kevin_agent.verdict_text import render_verdict

THEME = "ansi_dark"  # follows the terminal's palette; deterministic in screenshots


def code_view(code: str, lexer: str) -> Static:
    return Static(Syntax(terminal_safe(code), lexer,  # the model wrote it: no escapes reach the terminal
                          theme=THEME, line_numbers=True, word_wrap=False),
                  expand=True)


class CandidateScreen(Screen):
    """Tabs: Verdict (summary + details), Python (the whole answer), CUDA (its sources)."""

    BINDINGS = [
        Binding("a", "accept", "Accept & commit"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, run_id: str, candidate: Candidate, verdict: Optional[Verdict]) -> None:
        super().__init__(id="candidate")
        self.run_id, self.candidate, self.verdict = run_id, candidate, verdict

    def compose(self) -> ComposeResult:
        c = self.candidate
        yield Header()
        title = Text(c.id, style="bold")
        title.append(f" · trajectory {c.trajectory}, turn {c.turn} · {verdict_label(self.verdict)}"
                     f" · {c.tokens:,} tokens")
        yield Static(title, id="candidate-title")
        with TabbedContent(id="candidate-tabs"):
            with TabPane("Verdict", id="tab-verdict"):
                with VerticalScroll():
                    summary = terminal_safe(c.summary.strip() or c.parse_error or "(no summary)")
                    yield Static(Text("Model's summary\n", style="bold") + Text(summary + "\n"),
                                 id="summary")
                    yield Static(Text(_verdict_text(self.verdict)), id="verdict")
            with TabPane("Python", id="tab-python"):
                with VerticalScroll():
                    yield code_view(c.code or "(no code: the reply could not be parsed)", "python")
            with TabPane("CUDA", id="tab-cuda"):
                with VerticalScroll():
                    cuda = cuda_sources(c.code)
                    yield code_view(cuda or "// no load_inline sources found", "cuda")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"{self.run_id} · {self.candidate.id}"

    def action_accept(self) -> None:
        self.app.request_accept(self.run_id, self.candidate.id)  # type: ignore[attr-defined]  # KevinApp's



def _verdict_text(verdict: Optional[Verdict]) -> str:
    return render_verdict(verdict) if verdict is not None else "Not evaluated yet.\n"
