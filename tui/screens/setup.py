"""Run setup: backend, endpoint, model, trajectories, turns, target speedup (config defaults)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

from kevin_agent.config import BACKEND_NAMES
from kevin_agent.errors import KevinError
from kevin_agent.eval_modes import PARTIAL, POLICIES, STRICT, Policy, parse_policy
from kevin_agent.tui.discovery import ModuleEntry
from kevin_agent.tui.run_setup import SetupValues, run_request

TEXT_FIELDS = (  # (field of SetupValues, label, placeholder)
    ("endpoint", "Endpoint", "http://localhost:8000/v1"),
    ("model", "Model", "cognition-ai/Kevin-32B"),
    ("script", "Script", "scripted backend: replies.json"),
    ("trajectories", "Trajectories", "4"),
    ("turns", "Turns", "4"),
    ("target_speedup", "Target speedup", "none: play every turn"),
    ("cluster", "Ray cluster", "none: this machine (or auto, ray://head:10001)"),
)
POLICY_LABELS: dict[Policy, str] = {STRICT: "strict: own kernels only", PARTIAL: "partial: libraries allowed"}


class SetupScreen(Screen):
    """The form; Start (ctrl+s) opens the live run."""

    BINDINGS = [
        Binding("ctrl+s", "start", "Start run"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, entry: ModuleEntry) -> None:
        super().__init__(id="setup")
        self.entry = entry

    def compose(self) -> ComposeResult:
        values: SetupValues = self.app.setup_defaults()  # type: ignore[attr-defined]  # KevinApp's
        yield Header()
        with VerticalScroll(id="setup-form"):
            yield Static(Text(self.entry.module.name, style="bold")
                         + Text(f" · {self.entry.label}:{self.entry.module.start_line}"),
                         id="setup-title")
            with Horizontal(classes="field"):
                yield Label("Backend")
                backend = values.backend if values.backend in BACKEND_NAMES else "openai"
                yield Select([(name, name) for name in BACKEND_NAMES], value=backend,
                             allow_blank=False, compact=True, id="backend")
            with Horizontal(classes="field"):
                yield Label("Policy")
                yield Select([(POLICY_LABELS[policy], policy) for policy in POLICIES], value=values.policy,
                             allow_blank=False, compact=True, id="policy")
            for name, label, placeholder in TEXT_FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label)
                    yield Input(getattr(values, name), placeholder=placeholder, compact=True,
                                id=name)
            with Horizontal(id="setup-buttons"):
                yield Button("Start run", variant="primary", id="start", compact=True)
                yield Button("Back", id="back", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "run setup"
        self.query_one("#backend", Select).focus()

    def values(self) -> SetupValues:
        found = {name: self.query_one(f"#{name}", Input).value for name, _, _ in TEXT_FIELDS}
        backend = self.query_one("#backend", Select).value
        policy = self.query_one("#policy", Select).value
        return SetupValues(backend=str(backend), policy=parse_policy(policy), **found)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "start":
            self.action_start()
        else:
            self.action_back()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        app: Any = self.app  # KevinApp
        try:
            deps = app.deps
            request = run_request(self.values(), deps.repo_root or deps.root, target=self.entry.spec,
                                  evaluator=deps.evaluator_spec, run_id=app.next_run_id())
            deps.service.new_settings(request)  # bad input is said here, before the run screen
        except KevinError as err:
            self.notify(str(err), title="Cannot start", severity="error")
            return
        from kevin_agent.tui.screens.run import RunScreen

        app.switch_screen(RunScreen(entry=self.entry, request=request))

    def action_back(self) -> None:
        self.app.pop_screen()
