"""The Kevin language server: ``create_server(deps)`` builds it; handlers stay thin.

Runs play on the run manager's worker thread; handlers here only read buffers and state, so code
lenses and code actions answer quickly while a run goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import from_fs_path

from kevin_agent.lsp import commands
from kevin_agent.lsp import settings as lsp_settings
from kevin_agent.lsp.documents import ClassIndex, repo_root, uri_path
from kevin_agent.lsp.reporting import ACCEPT_ACTION, DIFF_ACTION, DISCARD_ACTION, Reporter, result_message
from kevin_agent.lsp.runs import RunManager, RunState
from kevin_agent.runs.service import PreparedRun, RunService
from kevin_agent.store import RunStore

log = logging.getLogger(__name__)

SERVER_NAME = "kevin-lsp"


@dataclass
class ServerDeps:
    """What the server builds runs from; tests and benchmarks pass their own."""

    service: Callable[[], RunService] = RunService  # the run service every run goes through


class KevinProtocol(LanguageServerProtocol):
    """Answers a request whose params do not fit its method with an error response (pygls alone
    only logs it, leaving the client waiting)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as err:
            if "id" in data and "method" in data:
                cause = err.__cause__
                err.message = f"{err.message}: {data['method']}: {cause}" if cause else err.message
                self._send_response(data["id"], error=err.to_response_error())
            raise


class KevinServer(LanguageServer):
    """pygls server holding the settings, the class index and the run manager."""

    def __init__(self, deps: ServerDeps) -> None:
        super().__init__(SERVER_NAME, "0.1.0", protocol_cls=KevinProtocol)
        self.deps = deps
        self.settings = lsp_settings.LspSettings()
        self.index = ClassIndex()
        self.reporter = Reporter(self)
        self.service = deps.service()
        self.runs = RunManager(self._open_run, self.reporter)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._reported_problems: tuple[str, ...] = ()
        self._reported_notes: set[str] = set()

    # -- plumbing ------------------------------------------------------------------------------

    def call_in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` on the event loop (the only thread that writes to the client)."""
        if self.loop is None or self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(fn, *args)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Errors go to the log, never a pop-up: the user cannot act on them."""
        if isinstance(error, commands.CommandFailed):
            return  # a refusal: its one line already went back as the command's error response
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        self.call_in_loop(self.log, f"Kevin: server error: {error}", types.MessageType.Error)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def _capability(self, *names: str) -> Any:
        value: Any = self.client_capabilities
        for name in names:
            value = getattr(value, name, None)
            if value is None:
                return None
        return value

    def supports_progress(self) -> bool:
        return bool(self._capability("window", "work_done_progress"))

    def supports_file_creation(self) -> bool:
        kinds = self._capability("workspace", "workspace_edit", "resource_operations") or []
        return types.ResourceOperationKind.Create in kinds and bool(
            self._capability("workspace", "workspace_edit", "document_changes"))

    def supports_disabled_actions(self) -> bool:
        return bool(self._capability("text_document", "code_action", "disabled_support"))

    def show_document(self, path: Path, take_focus: bool) -> None:
        uri = from_fs_path(str(path)) or path.as_uri()
        self.window_show_document(types.ShowDocumentParams(uri=uri, take_focus=take_focus))

    def refresh_lenses(self) -> None:
        if self._capability("workspace", "code_lens", "refresh_support"):
            self.workspace_code_lens_refresh(None)

    def publish_run_diagnostics(self, uri: str) -> None:
        from kevin_agent.lsp.diagnostics import run_diagnostics

        try:  # a closed buffer is read from disk; the file may be gone by now
            source = self.workspace.get_text_document(uri).source if uri_path(uri) else ""
        except OSError:
            source = ""
        scan = self.index.scan(uri, source) if source else None
        found = run_diagnostics(self.runs.for_uri(uri), scan, source)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=found))

    # -- settings --------------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        """Take validated settings; one message naming the bad ones (each reported once)."""
        self.settings, problems = lsp_settings.parse_settings(raw, self.settings)
        if problems and tuple(problems) != self._reported_problems:
            self._reported_problems = tuple(problems)
            self.show(lsp_settings.problems_message(problems), types.MessageType.Warning)
        for note in lsp_settings.deprecation_notes(raw):
            if note not in self._reported_notes:
                self._reported_notes.add(note)
                self.show(f"Kevin: {note}", types.MessageType.Warning)

    async def fetch_configuration(self) -> None:
        if not self._capability("workspace", "configuration"):
            return
        try:
            values = await self.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section=lsp_settings.SECTION)]))
        except Exception as err:  # a client without the section: keep what we have
            log.info("workspace/configuration failed: %s", err)
            return
        if values and values[0] is not None:
            self.apply_settings({lsp_settings.SECTION: values[0]})

    # -- runs ------------------------------------------------------------------------------------

    def store_for(self, path: Path) -> RunStore:
        """The run store of the repository holding ``path`` (its folder outside a repository)."""
        return self.service.store_for(repo_root(path) or path.parent)

    def shut_down(self) -> None:
        """Cancel every run, let them stop, then close what the run service opened."""
        self.runs.close(wait_s=10.0)
        self.service.close()

    def _open_run(self, state: RunState, events: Callable[[Any], None]) -> PreparedRun:
        """Called on the run worker thread: the run service opens the class's run."""
        path = uri_path(state.uri)
        assert path is not None
        request = state.request(self.settings.backend_flags(), self.settings.eval_flags(),
                                repo_root(path) or path.parent)
        return self.service.open(request, events)

    async def conclude(self, state: RunState) -> None:
        """A run ended: ask what to do with its kernel, or say plainly why there is none."""
        if state.status == "failed":
            self.show(f"Kevin: the run for {state.class_name} failed: {state.message}",
                      types.MessageType.Error)
            return
        if state.best is None:
            if state.status == "done":
                self.show(f"Kevin: no correct kernel for {state.class_name} "
                          f"({state.evaluated} candidates evaluated){state.untrusted_note()}",
                          types.MessageType.Warning)
            return
        choice = await self.window_show_message_request_async(types.ShowMessageRequestParams(
            type=types.MessageType.Info, message=result_message(state),
            actions=[types.MessageActionItem(t) for t in (ACCEPT_ACTION, DIFF_ACTION, DISCARD_ACTION)]))
        title = getattr(choice, "title", None)
        handlers = {ACCEPT_ACTION: commands.accept, DIFF_ACTION: commands.show_diff,
                    DISCARD_ACTION: commands.discard}
        if title not in handlers:
            return
        try:
            result = handlers[title](self, state.uri, state.class_name)
            if asyncio.iscoroutine(result):
                await result
        except Exception as err:  # e.g. the commit was refused: one message, server goes on
            self.show(f"Kevin: {title} failed: {err}", types.MessageType.Error)


def create_server(deps: Optional[ServerDeps] = None) -> KevinServer:
    """A ready Kevin language server (features and commands registered)."""
    from kevin_agent.lsp.features import register

    server = KevinServer(deps or ServerDeps())
    register(server)
    return server
