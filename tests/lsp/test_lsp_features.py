"""Capabilities, code lenses, code actions, settings and malformed requests, over stdio."""

from __future__ import annotations

import pytest
from lsp_support import execute, open_doc, replace_text, send_raw, server_env, wait_until
from lsprotocol import types

from kevin_agent.task import find_module_classes

pytestmark = pytest.mark.timeout(900)  # a guard: each test takes seconds


def _position_offset(text: str, position: types.Position) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: position.line]) + position.character


async def test_capabilities_name_every_command(launch, tmp_path, repo):
    _, result = await launch(server_env(tmp_path), repo)
    caps = result.capabilities
    assert caps.code_lens_provider is not None
    kinds = caps.code_action_provider.code_action_kinds
    assert types.CodeActionKind.RefactorRewrite in kinds and types.CodeActionKind.QuickFix in kinds
    assert set(caps.execute_command_provider.commands) >= {
        "kevin.optimize", "kevin.showDiff", "kevin.accept", "kevin.discard", "kevin.cancel"}
    assert result.server_info.name == "kevin-lsp"


async def test_a_lens_above_every_module_class(launch, tmp_path, repo):
    editor, _ = await launch(server_env(tmp_path), repo)
    uri = open_doc(editor.client, repo / "model.py")
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri)))
    by_line = {lens.range.start.line: lens.command for lens in lenses}
    source = (repo / "model.py").read_text().splitlines()
    assert sorted(by_line) == [i for i, line in enumerate(source) if line.startswith("class ")]
    model, scale = (by_line[i] for i in sorted(by_line))
    assert model.title == "Kevin: write CUDA kernel"
    assert model.command == "kevin.optimize" and list(model.arguments) == [uri, "Model"]
    # Scale has no example inputs: its lens is text only, with the code action's disabled reason
    scale_action = (await _actions(editor.client, uri, sorted(by_line)[1] + 1))[0]
    assert scale.title == f"Kevin: write CUDA kernel (unavailable: {scale_action.disabled.reason})"
    assert scale.command == "" and not scale.arguments
    assert "model.py:" in scale.title and "<source>" not in scale.title


async def _actions(client, uri: str, line: int):
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri),
        range=types.Range(types.Position(line, 4), types.Position(line, 4)),
        context=types.CodeActionContext(diagnostics=[])))


async def test_actions_inside_classes_with_reasons_and_the_quick_fix_edit(launch, tmp_path, repo):
    editor, _ = await launch(server_env(tmp_path), repo)
    text = (repo / "model.py").read_text()
    uri = open_doc(editor.client, repo / "model.py")
    lines = text.splitlines()
    model_body = lines.index("    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:")
    scale_body = lines.index("    def forward(self, x: torch.Tensor) -> torch.Tensor:")

    ready = await _actions(editor.client, uri, model_body)
    assert [(a.title, a.kind) for a in ready] == [
        ("Kevin: write a CUDA kernel for Model", types.CodeActionKind.RefactorRewrite)]
    assert ready[0].disabled is None
    assert ready[0].command.command == "kevin.optimize" and list(ready[0].command.arguments) == [uri, "Model"]

    assert list(await _actions(editor.client, uri, 1)) == []  # outside any class

    scale = await _actions(editor.client, uri, scale_body)
    rewrite, fix = scale
    assert rewrite.title == "Kevin: write a CUDA kernel for Scale"
    assert "get_inputs" in rewrite.disabled.reason
    assert fix.kind == types.CodeActionKind.QuickFix and fix.title == "Add example inputs for Scale"
    (edit,) = fix.edit.changes[uri]
    assert "def get_inputs():" in edit.new_text and "torch.randn(" in edit.new_text
    assert "real shape of x" in edit.new_text  # filled from forward(self, x)
    offset = _position_offset(text, edit.range.start)
    fixed = text[:offset] + edit.new_text + text[offset:]
    scale_class = [c for c in find_module_classes(fixed) if c.name == "Scale"][0]
    assert scale_class.has_inputs  # the inserted stub really gives Scale example inputs

    replace_text(editor.client, uri, text.replace("return a + b", "return a +"))
    broken = await _actions(editor.client, uri, model_body)
    assert [a.title for a in broken] == ["Kevin: write a CUDA kernel for Model"]
    assert broken[0].disabled.reason.startswith("fix the syntax error first: model.py:")  # the file, not <source>
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri)))
    assert {lens.command.title for lens in lenses} == {  # the last good classes, disabled alike
        f"Kevin: write CUDA kernel (unavailable: {broken[0].disabled.reason})"}


async def test_bad_settings_one_message_and_defaults(launch, tmp_path, repo):
    editor, _ = await launch(server_env(tmp_path), repo,
                             init_options={"kevin": {"trajectories": "many", "turns": 0,
                                                     "baseUrl": "localhost:8000", "model": "m"}})
    message = await wait_until(lambda: editor.client.messages, what="the settings message")
    assert len(message) == 1 and message[0].type == types.MessageType.Warning
    text = message[0].message
    assert "kevin.trajectories" in text and "kevin.turns" in text and "kevin.baseUrl" in text
    assert "kevin.model" not in text


async def test_the_old_endpoint_setting_works_and_says_to_rename_it(launch, tmp_path, repo):
    editor, _ = await launch(server_env(tmp_path), repo, init_options={"kevin": {"endpoint": "http://gpu:8000/v1"}})
    message = await wait_until(lambda: editor.client.messages, what="the deprecation note")
    assert len(message) == 1 and message[0].type == types.MessageType.Warning
    assert "kevin.endpoint is deprecated: rename it kevin.baseUrl" in message[0].message


async def test_malformed_requests_get_errors_and_the_server_keeps_serving(launch, tmp_path, repo):
    editor, _ = await launch(server_env(tmp_path), repo)
    uri = open_doc(editor.client, repo / "model.py")
    with pytest.raises(Exception, match="Expected 2 arguments"):
        await execute(editor.client, "kevin.optimize")
    with pytest.raises(Exception, match="has no class Nope"):
        await execute(editor.client, "kevin.optimize", uri, "Nope")
    with pytest.raises(Exception, match="example inputs|get_inputs"):
        await execute(editor.client, "kevin.optimize", uri, "Scale")
    with pytest.raises(Exception, match="no finished Kevin run"):
        await execute(editor.client, "kevin.accept", uri, "Model")
    with pytest.raises(Exception, match="(?i)invalid|error"):
        await send_raw(editor.client, "bad-1", types.TEXT_DOCUMENT_CODE_LENS, {"textDocument": "x"})
    with pytest.raises(Exception, match="works on files"):
        await send_raw(editor.client, "bad-2", types.WORKSPACE_EXECUTE_COMMAND,
                       {"command": "kevin.optimize", "arguments": [{"a": 1}, 5]})
    assert await execute(editor.client, "kevin.cancel", uri, "Model") == {"cancelled": False}
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri)))
    assert len(lenses) == 2
