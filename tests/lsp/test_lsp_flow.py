"""The whole flow over stdio: optimize -> progress -> verdict logs -> question -> accept -> commit,
and cancel, show diff / discard, queueing, a failing evaluator. Scripted backend, replay evaluator."""

from __future__ import annotations

import pytest
from lsp_support import (
    MODULE_SOURCE,
    execute,
    git,
    logs,
    open_doc,
    scripted,
    server_env,
    wait_until,
    write_fixtures,
)
from lsprotocol import types

from kevin_agent.store import RunStore

pytestmark = pytest.mark.timeout(900)  # a guard: a flow takes seconds

PLAN = {(0, 0): "slow", (1, 0): "quick", (0, 1): "fastest", (1, 1): "wrong"}
EDITED = MODULE_SOURCE.replace("return a + b", "return b + a")  # unsaved edit in the buffer


def _lenses(client, uri):
    return client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri)))


async def test_optimize_progress_logs_question_accept_commit(launch, tmp_path, repo):
    env, script = write_fixtures(tmp_path, PLAN)
    editor, _ = await launch(env, repo, init_options=scripted(script))
    client = editor.client
    editor.answer = "Accept & commit"
    uri = open_doc(client, repo / "model.py", EDITED)

    started = await execute(client, "kevin.optimize", uri, "Model")
    assert started["class"] == "Model"
    await wait_until(lambda: [m for m in client.messages if "committed" in m.message],
                     what="the commit message")
    question = editor.questions[0]
    assert question.message.startswith("Kevin: 3.00x vs eager for Model")
    assert [a.title for a in question.actions] == ["Accept & commit", "Show diff", "Discard"]

    verdict_logs = [m for m in logs(client) if m.startswith("Kevin Model t")]
    assert len(verdict_logs) == 4 and any("t0.1: timing ok, 3.00x vs eager" in m for m in verdict_logs)
    assert any("correctness failed" in m for m in verdict_logs)

    (reports,) = client.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert any("turn 1 (0-1)" in (r.message or "") for r in reports[1:-1])  # 0-based, like t0.1

    # the commit: exactly the kernel files, numbers in the message, the user's file untouched
    head = git(repo, "log", "-1", "--format=%B")
    assert "Model" in head and "3.00x" in head
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert committed and "model.py" not in committed and any(p.endswith(".cu") for p in committed)
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    applied = editor.applied_edits[0].edit.document_changes
    assert {type(c) for c in applied} == {types.CreateFile, types.TextDocumentEdit}

    record = RunStore.for_path(repo).load_run("latest")
    assert "b + a" in record.task.source  # the buffer's text, not the file on disk
    assert record.status == "done"

    lenses = await _lenses(client, uri)
    model_titles = [lens.command.title for lens in lenses if lens.range.start.line == 4]
    assert model_titles[0].startswith("Kevin: 3.00x vs eager") and "on replay" in model_titles[0]
    assert model_titles[1:] == ["re-run", "open kernel"]


async def test_cancel_keeps_finished_work(launch, tmp_path, repo):
    plan = {(i, t): "slow" for i in range(2) for t in range(4)}
    env, script = write_fixtures(tmp_path, plan, delay_s=0.4)
    editor, _ = await launch(env, repo, init_options=scripted(script, turns=4))
    client = editor.client
    uri = open_doc(client, repo / "model.py")
    await execute(client, "kevin.optimize", uri, "Model")
    await wait_until(lambda: any(m.startswith("Kevin Model t") for m in logs(client)), what="a verdict")
    token = next(iter(client.progress_reports))
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    await wait_until(lambda: any(isinstance(r, types.WorkDoneProgressEnd)
                                 for r in client.progress_reports[token]), what="progress end")
    await wait_until(lambda: editor.questions, what="the question after cancel")
    record = RunStore.for_path(repo).load_run("latest")
    assert record.status == "cancelled"
    judged = [c for c, v in record.candidates if v is not None]
    assert 1 <= len(judged) < 8
    assert "(run cancelled)" in editor.questions[0].message
    # the run is over: a new one may start, and cancel now reports nothing to cancel
    assert await execute(client, "kevin.cancel", uri, "Model") == {"cancelled": False}


async def test_show_diff_then_discard_and_queueing(launch, tmp_path, repo):
    env, script = write_fixtures(tmp_path, PLAN, delay_s=0.2)
    editor, _ = await launch(env, repo, init_options=scripted(script))
    client = editor.client
    editor.answer = "Show diff"
    second = repo / "other.py"
    second.write_text(MODULE_SOURCE)
    uri = open_doc(client, repo / "model.py")
    other = open_doc(client, second)
    assert (await execute(client, "kevin.optimize", uri, "Model"))["class"] == "Model"
    assert (await execute(client, "kevin.optimize", other, "Model"))["status"] == "queued"
    with pytest.raises(Exception, match="already"):
        await execute(client, "kevin.optimize", uri, "Model")
    await wait_until(lambda: len(editor.questions) == 2, what="both runs to finish")

    # the second answer reaches the server after the question was recorded: wait for its diff
    def shown_diffs():
        return [d.uri for d in client.shown_documents if d.uri.endswith(".diff")]

    await wait_until(lambda: len(shown_diffs()) >= 2, what="both diffs")
    diffs = shown_diffs()
    assert len(diffs) == 2 and all("/.kevin/diffs/" in d for d in diffs)
    diff_text = open(diffs[0][len("file://"):]).read()
    assert "+++ b/" in diff_text and "__global__" in diff_text
    diag = client.diagnostics[uri]
    assert len(diag) == 1 and diag[0].severity == types.DiagnosticSeverity.Information
    assert diag[0].range.start.line == 4 and "3.00x" in diag[0].message

    assert (await execute(client, "kevin.discard", uri, "Model"))["discarded"]
    await wait_until(lambda: list(client.diagnostics[uri]) == [], what="the diagnostic to clear")
    assert git(repo, "log", "--format=%s").count("\n") == 1  # nothing committed


async def test_a_failing_evaluator_fails_the_run_not_the_server(launch, tmp_path, repo):
    env = server_env(tmp_path, evaluator=f"replay:{tmp_path / 'missing.json'}")
    _, script = write_fixtures(tmp_path, PLAN)
    editor, _ = await launch(env, repo, init_options=scripted(script))
    client = editor.client
    uri = open_doc(client, repo / "model.py")
    await execute(client, "kevin.optimize", uri, "Model")
    failed = await wait_until(lambda: [m for m in client.messages if m.type == types.MessageType.Error],
                              what="the failure message")
    assert "failed" in failed[0].message and "missing.json" in failed[0].message
    assert "failed" in client.diagnostics[uri][0].message
    lenses = await _lenses(client, uri)
    assert lenses[0].command.command == "kevin.optimize"  # ready to run again


async def test_the_write_action_is_disabled_while_the_class_has_a_run(launch, tmp_path, repo):
    """A second run of the same class is never offered while one is queued or running."""
    plan = {(i, t): "slow" for i in range(2) for t in range(4)}
    env, script = write_fixtures(tmp_path, plan, delay_s=0.4)
    editor, _ = await launch(env, repo, init_options=scripted(script, turns=4))
    client = editor.client
    uri = open_doc(client, repo / "model.py")
    body = (repo / "model.py").read_text().splitlines().index(
        "    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:")

    async def rewrite_action():
        found = await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri), range=types.Range(
                types.Position(body, 4), types.Position(body, 4)), context=types.CodeActionContext(diagnostics=[])))
        (action,) = [a for a in found if a.kind == types.CodeActionKind.RefactorRewrite]
        return action

    assert (await rewrite_action()).disabled is None
    await execute(client, "kevin.optimize", uri, "Model")
    await wait_until(lambda: any(m.startswith("Kevin Model t") for m in logs(client)), what="a verdict")
    busy = await rewrite_action()
    assert busy.disabled is not None and "already running" in busy.disabled.reason
    assert await execute(client, "kevin.cancel", uri, "Model") == {"cancelled": True}
    await wait_until(lambda: editor.questions, what="the question after cancel")
    assert (await rewrite_action()).disabled is None  # the run is over: the action is back
