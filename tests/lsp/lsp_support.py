"""Helpers for the language-server tests: a temporary git repo with a module, scripted replies,
replay verdicts, and a pytest-lsp client that plays a real editor (applies edits, answers
questions) talking to `python -m kevin_agent lsp` over stdio."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

from loop_fixtures import write_replay, write_script
from lsprotocol import types
from pygls.uris import to_fs_path
from pytest_lsp import LanguageClient, make_test_lsp_client

ROOT = Path(__file__).resolve().parents[2]

MODULE_SOURCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    @staticmethod
    def get_inputs():
        return [torch.randn(64, 64), torch.randn(64, 64)]

    @staticmethod
    def get_init_inputs():
        return []


class Scale(nn.Module):
    def __init__(self, factor: float = 2.0):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor
'''

CAPABILITIES = types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        apply_edit=True,
        workspace_edit=types.WorkspaceEditClientCapabilities(
            document_changes=True, resource_operations=[types.ResourceOperationKind.Create]),
        code_lens=types.CodeLensWorkspaceClientCapabilities(refresh_support=True),
    ),
    text_document=types.TextDocumentClientCapabilities(
        code_action=types.CodeActionClientCapabilities(disabled_support=True)),
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(tmp_path: Path, source: str = MODULE_SOURCE) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    (repo / "model.py").write_text(source)
    git(repo, "add", "model.py")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def write_fixtures(tmp_path: Path, plan: dict[tuple[int, int], str],
                   delay_s: float = 0.0) -> tuple[dict[str, str], str]:
    """Script + replay files: (server environment using the replay evaluator, script path)."""
    script = write_script(tmp_path / "script.json", plan)
    replay = write_replay(tmp_path / "replay.json", delay_s=delay_s)
    return server_env(tmp_path, evaluator=f"replay:{replay}"), str(script)


def scripted(script: str, trajectories: int = 2, turns: int = 2) -> dict[str, Any]:
    """initializationOptions selecting the scripted backend."""
    return {"kevin": {"backend": "scripted", "script": script, "trajectories": trajectories,
                      "turns": turns}}


def server_env(tmp_path: Path, evaluator: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    env["KEVIN_EVALUATOR"] = evaluator
    env["HOME"] = str(tmp_path)  # no user git config or kevin config leaks in
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def _structure_action(converter: Any) -> None:
    """lsprotocol 2025.0.0's client turns a returned CodeAction into a Command: pick by the type
    of the ``command`` field (a string for Command, an object for CodeAction)."""

    def hook(value: Any, _type: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("command"), str):
            return converter.structure(value, types.Command)
        return converter.structure(value, types.CodeAction)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], hook)


def _apply_edit_on_disk(client: EditorClient, params: types.ApplyWorkspaceEditParams):
    """What an editor that saves does with the accept edit: create the files, write the text."""
    client.applied_edits.append(params)
    for change in params.edit.document_changes or []:
        if isinstance(change, types.CreateFile):
            path = Path(str(to_fs_path(change.uri)))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        elif isinstance(change, types.TextDocumentEdit):
            path = Path(str(to_fs_path(change.text_document.uri)))
            text = path.read_text() if path.exists() else ""
            for edit in change.edits:
                assert isinstance(edit, types.TextEdit) and edit.range.start == types.Position(0, 0)
                text = edit.new_text + text
            path.write_text(text)
    return types.ApplyWorkspaceEditResult(applied=True)


class EditorClient:
    """A pytest-lsp client plus what the fake user does and saw."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.answer: Optional[str] = None  # title picked for window/showMessageRequest
        self.questions: list[types.ShowMessageRequestParams] = []
        self.applied_edits: list[types.ApplyWorkspaceEditParams] = []


async def start(env: dict[str, str], cwd: Path, init_options: Any = None,
                configuration: Optional[dict] = None) -> tuple[EditorClient, types.InitializeResult]:
    client = make_test_lsp_client()
    _structure_action(client.protocol._converter)
    editor = EditorClient(client)
    if configuration is not None:
        client.set_configuration(configuration, section="kevin")

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def question(params: types.ShowMessageRequestParams):
        editor.questions.append(params)
        return next((a for a in params.actions or [] if a.title == editor.answer), None)

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        return _apply_edit_on_disk(editor, params)

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def refresh(params: None) -> None:
        return None

    await client.start_io(sys.executable, "-m", "kevin_agent", "lsp", env=env, cwd=str(cwd))
    result = await client.initialize_session(types.InitializeParams(
        capabilities=CAPABILITIES, root_uri=cwd.as_uri(), initialization_options=init_options))
    return editor, result


def open_doc(client: LanguageClient, path: Path, text: Optional[str] = None) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=path.read_text() if text is None else text)))
    return uri


def replace_text(client: LanguageClient, uri: str, text: str, version: int = 2) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


async def wait_until(predicate: Callable[[], Any], timeout: float = 300.0, what: str = "") -> Any:
    """Poll already-received state (never misses a message that came before the call). The
    timeout is a guard only, several times what a wait takes on a busy 2-core machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def logs(client: LanguageClient) -> list[str]:
    return [m.message for m in client.log_messages]


async def execute(client: LanguageClient, command: str, *arguments: Any) -> Any:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=list(arguments)))


async def send_raw(client: LanguageClient, msg_id: str, method: str, params: Any) -> Any:
    """Send a request as raw JSON (no client-side typing), e.g. a malformed one; await its reply."""
    import json
    from concurrent.futures import Future

    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future
    assert client.protocol.writer is not None
    client.protocol.writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    return await asyncio.wait_for(asyncio.wrap_future(future), 120)  # a guard: replies take milliseconds
