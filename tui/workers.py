"""The app's long work, each in a thread worker; results come back as Messages.

Every worker runs on the App, so the App's one ``Worker.StateChanged`` handler sees every failure.
"""

from __future__ import annotations

import threading
from typing import Any

from textual import work
from textual.message_pump import MessagePump

from kevin_agent.tui.messages import (
    AcceptCommitted,
    AcceptPlanned,
    ModulesScanned,
    RunEventArrived,
    RunFinished,
    RunLoaded,
    RunResumed,
    RunsListed,
    UndoDone,
    UndoProposed,
)

WORK: dict[str, Any] = dict(thread=True, exclusive=True, exit_on_error=False)


class WorkersMixin:
    """Mixed into KevinApp: needs ``self.deps`` (app.AppDeps) and Textual's App."""

    deps: Any

    @work(group="scan", **WORK)
    def scan_modules(self, target: MessagePump) -> None:
        from kevin_agent.tui.discovery import scan_modules

        target.post_message(ModulesScanned(scan_modules(self.deps.root, self.deps.repo_root)))

    @work(group="run", **WORK)
    def start_run(self, target: MessagePump, request: Any, cancel: threading.Event) -> None:
        """The run service opens and plays the run; events stream to ``target``."""
        prepared = self.deps.service.open(request, lambda event: target.post_message(RunEventArrived(event)))
        if request.resume:  # show what the run has so far; its new events follow
            store = self.deps.service.store_for(request.config_dir)
            target.post_message(RunResumed(store.load_run(prepared.session.run_id)))
        outcome = prepared.play(cancel)
        target.post_message(RunFinished(outcome.record))

    @work(group="runs", **WORK)
    def list_runs(self, target: MessagePump) -> None:
        target.post_message(RunsListed(self.deps.store.list_runs()))

    @work(group="runs", **WORK)
    def open_run(self, run_id: str) -> None:
        self.post_message(RunLoaded(self.deps.store.load_run(run_id)))  # type: ignore[attr-defined]  # runs on the App

    @work(group="accept", **WORK)
    def request_accept(self, run_id: str, candidate_id: str) -> None:
        """Plan the accept (no writes) and check it can commit; the app then shows the diff."""
        from kevin_agent.accept import plan_accept, preflight

        plan = plan_accept(self.deps.store.load_run(run_id), candidate_id)
        preflight(plan)
        self.post_message(AcceptPlanned(plan))  # type: ignore[attr-defined]  # runs on the App

    @work(group="accept", **WORK)
    def commit_accept(self, plan: Any) -> None:
        from kevin_agent.accept import accept

        result = accept(plan)
        subject = result.message.splitlines()[0] if result.message else ""
        self.post_message(AcceptCommitted(  # type: ignore[attr-defined]  # runs on the App
            result.sha, subject, [plan.label(p) for p in result.paths]))

    @work(group="accept", **WORK)
    def propose_undo(self) -> None:
        """Find the commit undo would revert; the app asks before ``undo_accept``."""
        from kevin_agent.accept import undo_target

        sha, subject = undo_target(self._repo_for_undo())
        self.post_message(UndoProposed(sha, subject))  # type: ignore[attr-defined]  # runs on the App

    @work(group="accept", **WORK)
    def undo_accept(self, expected: Any = None) -> None:
        from kevin_agent.accept import undo_last

        done = UndoDone(undo_last(self._repo_for_undo(), expected))
        self.post_message(done)  # type: ignore[attr-defined]  # runs on the App

    def _repo_for_undo(self) -> Any:
        from kevin_agent.errors import UserInputError

        if self.deps.repo_root is None:
            raise UserInputError(f"{self.deps.root} is not inside a git repository: nothing to undo")
        return self.deps.repo_root
