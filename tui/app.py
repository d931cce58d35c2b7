"""The Textual app: ``create_app(...)`` builds it with its dependencies (tests inject doubles)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from kevin_agent.errors import KevinError
from kevin_agent.runs.service import RunService
from kevin_agent.store import RunStore, find_repo_root
from kevin_agent.tui.commands import KevinCommands
from kevin_agent.tui.messages import AcceptCommitted, AcceptPlanned, RunLoaded, UndoDone, UndoProposed
from kevin_agent.tui.run_setup import SetupValues, default_values
from kevin_agent.tui.workers import WorkersMixin


@dataclass
class AppDeps:
    """Everything the app talks to; ``create_app`` fills the defaults."""

    root: Path  # the folder (or file) browsed for modules
    repo_root: Optional[Path]  # the git repository (config, accept, undo); None outside one
    service: RunService  # every run goes through it; closed when the app exits
    evaluator_spec: Optional[str] = None  # make_evaluator spec ("replay:PATH"); None: $KEVIN_EVALUATOR
    run_ids: Optional[Callable[[], str]] = None  # run id factory (deterministic tests)

    @property
    def store(self) -> RunStore:
        return self.service.store_for(self.repo_root or self.root)


def error_line(error: Optional[BaseException]) -> str:
    """One line for a notification: the KevinError's text, or the exception's type and text."""
    if error is None:
        return "unknown error"
    if isinstance(error, KevinError):
        return str(error)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class KevinApp(WorkersMixin, App):
    """Browse modules -> set up -> live run -> candidate -> diff -> commit."""

    CSS_PATH = "app.tcss"
    TITLE = "kevin"
    COMMANDS = App.COMMANDS | {KevinCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("r", "past_runs", "Past runs", show=False),
        Binding("u", "undo", "Undo accept", show=False),
    ]

    def __init__(self, deps: AppDeps) -> None:
        super().__init__()
        self.deps = deps
        self.quit_after_run = False

    @property
    def repo_root(self) -> Optional[Path]:
        return self.deps.repo_root

    @property
    def evaluator_spec(self) -> Optional[str]:
        return self.deps.evaluator_spec

    def on_mount(self) -> None:
        from kevin_agent.tui.screens.browser import BrowserScreen

        self.push_screen(BrowserScreen())

    def on_unmount(self) -> None:
        self.deps.service.close()

    def next_run_id(self) -> Optional[str]:
        return self.deps.run_ids() if self.deps.run_ids else None

    def setup_defaults(self) -> SetupValues:
        try:
            return default_values(self.deps.service, self.deps.repo_root)
        except KevinError as err:
            self.notify(str(err), title="Config", severity="warning")
            return SetupValues()

    # -- the one place worker failures surface -------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR:
            self.notify(error_line(worker.error), title=f"{worker.group} failed",
                        severity="error", timeout=10)
            if worker.group == "run":
                screen = self.run_screen()
                if screen is not None:
                    screen.mark_failed(error_line(worker.error))
        if (worker.group == "run" and self.quit_after_run
                and event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)):
            self.exit()

    # -- results -------------------------------------------------------------------------------

    def on_run_loaded(self, message: RunLoaded) -> None:
        from kevin_agent.tui.screens.run import RunScreen

        self.push_screen(RunScreen(record=message.record))

    def on_accept_planned(self, message: AcceptPlanned) -> None:
        from kevin_agent.tui.screens.diff import DiffScreen

        plan = message.plan

        def answered(commit: Optional[bool]) -> None:
            if commit:
                self.commit_accept(plan)
            else:
                self.notify("Nothing was written.", title="Discarded")

        self.push_screen(DiffScreen(plan), answered)

    def on_accept_committed(self, message: AcceptCommitted) -> None:
        sha = (message.sha or "")[:10]
        self.notify(f"{sha} {message.subject}\n" + "\n".join(message.paths), title="Committed",
                    timeout=10)
        self._rescan()

    def on_undo_done(self, message: UndoDone) -> None:
        self.notify(f"Reverted the latest kevin-agent commit ({message.sha[:10]}).", title="Undone")
        self._rescan()

    def _rescan(self) -> None:
        from kevin_agent.tui.screens.browser import BrowserScreen

        for screen in self.screen_stack:
            if isinstance(screen, BrowserScreen):
                screen.action_rescan()

    # -- actions -------------------------------------------------------------------------------

    def run_screen(self) -> Any:
        from kevin_agent.tui.screens.run import RunScreen

        found = [s for s in self.screen_stack if isinstance(s, RunScreen) and s.running]
        return found[-1] if found else None

    def action_past_runs(self) -> None:
        from kevin_agent.tui.screens.runs import RunsScreen

        self.push_screen(RunsScreen())

    def action_undo(self) -> None:
        """Undo the latest accept, after saying which commit it reverts and asking."""
        self.propose_undo()

    def on_undo_proposed(self, message: UndoProposed) -> None:
        from kevin_agent.tui.screens.confirm import ConfirmScreen

        def answered(yes: Optional[bool]) -> None:
            if yes:
                self.undo_accept(message.sha)
            else:
                self.notify("Nothing was reverted.", title="Undo")

        self.push_screen(ConfirmScreen(f"Revert {message.sha[:10]} {message.subject}?\n"
                                       "A new commit restores its files; history is kept.",
                                       yes="Revert", no="Keep"), answered)

    def resume_run(self, run_id: str) -> None:
        """Continue a stored, unfinished run on a live run screen (the service refuses a run
        another process is playing, with one line)."""
        from kevin_agent.runs.request import RunRequest
        from kevin_agent.tui.screens.run import RunScreen

        request = RunRequest(resume=run_id, config_dir=self.deps.repo_root or self.deps.root,
                             evaluator=self.deps.evaluator_spec)
        self.push_screen(RunScreen(request=request))

    async def action_quit(self) -> None:
        """Quit; during a run, ask first, then cancel it (finished work stays in the store)."""
        screen = self.run_screen()
        if screen is None:
            self.exit()
            return
        from kevin_agent.tui.screens.confirm import ConfirmScreen

        def answered(yes: Optional[bool]) -> None:
            if not yes:
                return
            self.quit_after_run = True
            screen.action_cancel_run()
            if not any(w.group == "run" and w.is_running for w in self.workers):
                self.exit()

        self.push_screen(ConfirmScreen("A run is in progress. Cancel it and quit?\n"
                                       "Finished candidates stay in the store.",
                                       yes="Cancel run and quit", no="Keep running"), answered)


def create_app(
    path: Optional[Path] = None,
    *,
    backend_factory: Optional[Callable[[Any], Any]] = None,
    evaluator: Any = None,
    evaluator_spec: Optional[str] = None,
    store: Optional[RunStore] = None,
    repo_root: Optional[Path] = None,
    run_ids: Optional[Callable[[], str]] = None,
    env: Optional[Mapping[str, str]] = None,
) -> KevinApp:
    """The app for ``path`` (default: the repository root, else the current folder).

    ``backend_factory``, ``evaluator``, ``store`` and ``env`` replace the run service's defaults
    (tests inject doubles); an injected evaluator is shared by every run and never closed here.
    """
    start = Path(path) if path is not None else Path.cwd()
    if repo_root is None:
        repo_root = find_repo_root(start)
    root = Path(path).resolve() if path is not None else (repo_root or Path.cwd()).resolve()
    service = RunService(environ=env, make_backend=backend_factory, evaluator=evaluator, store=store)
    deps = AppDeps(root=root, repo_root=repo_root, service=service, evaluator_spec=evaluator_spec,
                   run_ids=run_ids)
    return KevinApp(deps)
