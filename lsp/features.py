"""One thin handler per LSP feature, registered on a KevinServer."""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from kevin_agent.lsp import commands
from kevin_agent.lsp.actions import busy_reason, code_actions, only_kinds
from kevin_agent.lsp.documents import repo_root, uri_path
from kevin_agent.lsp.lenses import code_lenses

log = logging.getLogger(__name__)


def _accepted_lookup(uri: str):
    from kevin_agent.accept import find_accepted

    path = uri_path(uri)
    root = repo_root(path) if path is not None else None

    def accepted_of(class_name: str):
        if path is None or root is None:
            return None
        try:
            return find_accepted(root, path, class_name)
        except Exception:  # a broken accepted header must not break the lens
            log.exception("find_accepted failed for %s", class_name)
            return None

    return accepted_of


def register(server) -> None:
    """Attach every feature and command of the Kevin language server."""
    _register_lifecycle(server)
    _register_editing(server)
    for name, handler in commands.COMMANDS.items():
        server.command(name)(commands.guarded(handler))


def _register_lifecycle(server) -> None:
    """Initialization, settings, shutdown, progress cancel."""

    @server.feature(types.INITIALIZE)
    def on_initialize(ls, params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        await ls.fetch_configuration()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(ls, params: types.DidChangeConfigurationParams) -> None:
        if params.settings:
            ls.apply_settings(params.settings)
        await ls.fetch_configuration()

    @server.feature(types.SHUTDOWN)
    def on_shutdown(ls, params: None) -> None:
        ls.shut_down()

    @server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def on_progress_cancel(ls, params: types.WorkDoneProgressCancelParams) -> None:
        key = ls.reporter.run_of_token(params.token)
        if key is not None:
            ls.runs.cancel(*key)


def _register_editing(server) -> None:
    """Buffers, code lenses and code actions."""

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def on_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        ls.index.forget(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def on_code_lens(ls, params: types.CodeLensParams) -> list[types.CodeLens]:
        uri = params.text_document.uri
        scan = ls.index.scan(uri, ls.workspace.get_text_document(uri).source)
        return code_lenses(uri, scan.classes, lambda name: ls.runs.get(uri, name),
                           _accepted_lookup(uri))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite,
                                                   types.CodeActionKind.QuickFix]),
    )
    def on_code_action(ls, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        source = ls.workspace.get_text_document(uri).source
        scan = ls.index.scan(uri, source)
        line = params.range.start.line
        busy = busy_reason(ls.runs.for_uri(uri), scan, line)
        found = code_actions(uri, source, scan, line, busy, ls.supports_disabled_actions())
        return only_kinds(found, params.context.only)
