"""The kevin.* commands: thin handlers over the core (task, session via the run manager, accept).

Handlers take the server as ``ls`` (left unannotated: pygls reads the other annotations to
convert arguments). Each returns a small JSON-ready dict; refusals raise ``CommandFailed`` (an error response whose
message is the one line for the user); the server keeps serving.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import from_fs_path

from kevin_agent.errors import KevinError, UserInputError
from kevin_agent.lsp.documents import uri_path
from kevin_agent.lsp.runs import RunState
from kevin_agent.task import task_from_source

if TYPE_CHECKING:
    from kevin_agent.accept import AcceptPlan
    from kevin_agent.run_record import RunRecord

DIFF_DIR = "diffs"  # under .kevin/


class CommandFailed(JsonRpcException):
    """LSP RequestFailed: the message is the one line for the user."""

    CODE = -32803


def fail(err: Exception) -> CommandFailed:
    return CommandFailed(message=str(err))


def _file_path(uri: str) -> Path:
    path = uri_path(uri)
    if path is None:
        raise UserInputError(f"{uri}: Kevin works on files (file:// URIs) only")
    return path


def optimize(ls, uri: str, class_name: str) -> dict[str, Any]:
    """Start (or queue) a run on the buffer's current text, unsaved edits included."""
    path = _file_path(uri)
    source = ls.workspace.get_text_document(uri).source  # the open buffer, else the file
    task = task_from_source(source, str(path), class_name)
    settings = ls.settings
    state = RunState(uri=uri, class_name=class_name, task=task,
                     trajectories=settings.trajectories, turns=settings.turns)
    ls.runs.submit(state)
    return {"status": state.status, "class": class_name}


def cancel(ls, uri: str, class_name: str) -> dict[str, Any]:
    return {"cancelled": ls.runs.cancel(uri, class_name)}


def finished_record(ls, uri: str, class_name: str) -> RunRecord:
    """The record of the class's finished run: the one in memory, else the newest stored one."""
    path = _file_path(uri)
    state = ls.runs.get(uri, class_name)
    store = ls.store_for(path)
    if state is not None:
        if state.active:
            raise UserInputError(f"the Kevin run for {class_name} is still {state.status}")
        if state.run_id is None:
            raise UserInputError(f"the Kevin run for {class_name} never started")
        return store.load_run(state.run_id)
    resolved = str(path.resolve())
    for summary in store.list_runs():
        if summary.class_name == class_name and summary.status in ("done", "cancelled"):
            record = store.load_run(summary.run_id)
            origin = record.task.origin
            if origin is not None and os.path.realpath(origin.path) == resolved:
                return record
    raise UserInputError(f"no finished Kevin run for {class_name}: run kevin.optimize first")


def plan_for(ls, uri: str, class_name: str) -> AcceptPlan:
    from kevin_agent.accept import plan_accept

    return plan_accept(finished_record(ls, uri, class_name))


def _off_loop(fn: Any, *args: Any) -> asyncio.Future[Any]:
    """Blocking work (store reads, git, file writes) on a thread, so the event loop keeps serving."""
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _write_diff(ls, uri: str, class_name: str) -> tuple[Path, list[Path]]:
    """The diff accepting would make, and read-only copies of its files, under .kevin/diffs/."""
    plan = plan_for(ls, uri, class_name)
    folder = ls.store_for(_file_path(uri)).path.parent / DIFF_DIR
    folder.mkdir(parents=True, exist_ok=True)
    diff_path = folder / f"{plan.run_id}-{class_name}.diff"
    diff_path.write_text(plan.diff(), encoding="utf-8")
    previews = []
    for path in sorted(plan.files):  # read-only copies of the files accepting would write
        parts = [part for part in Path(plan.label(path)).parts if part not in ("..", "/")]
        preview = folder.joinpath(plan.run_id, *parts)
        preview.parent.mkdir(parents=True, exist_ok=True)
        preview.write_text(plan.files[path], encoding="utf-8")
        previews.append(preview)
    return diff_path, previews


async def show_diff(ls, uri: str, class_name: str) -> dict[str, Any]:
    """Write the diff accepting would make (and previews of its files) under .kevin/diffs/; open them."""
    diff_path, previews = await _off_loop(_write_diff, ls, uri, class_name)
    ls.show_document(diff_path, take_focus=True)
    for preview in previews:
        ls.show_document(preview, take_focus=False)
    return {"diff": str(diff_path), "files": [str(p) for p in previews]}


def _workspace_edit(plan: AcceptPlan) -> types.WorkspaceEdit:
    """CreateFile + a whole-text insert for every file accepting writes."""
    changes: list[Any] = []
    for path in sorted(plan.files):
        uri = from_fs_path(str(path)) or path.as_uri()
        changes.append(types.CreateFile(uri=uri, options=types.CreateFileOptions(overwrite=True)))
        start = types.Position(0, 0)
        changes.append(types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None),
            edits=[types.TextEdit(range=types.Range(start, start), new_text=plan.files[path])],
        ))
    return types.WorkspaceEdit(document_changes=changes)


def _settle_editor_files(plan: AcceptPlan, absent_before: set[Path]) -> None:
    """Files the editor just created but left empty or unsaved are written by the core instead."""
    for path in absent_before:
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()


async def accept(ls, uri: str, class_name: str) -> dict[str, Any]:
    """Files through workspace/applyEdit, then the commit of exactly them through the core."""
    from kevin_agent.accept import accept as commit_plan
    from kevin_agent.accept import preflight

    def checked_plan() -> AcceptPlan:
        plan = plan_for(ls, uri, class_name)
        preflight(plan)  # git status: refusals before the editor writes anything
        return plan

    plan = await _off_loop(checked_plan)
    absent = {path for path in plan.files if not path.exists()}
    if ls.supports_file_creation():
        result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit=_workspace_edit(plan), label=f"Kevin: kernel for {class_name}"))
        if not result.applied:
            raise UserInputError(f"the editor did not apply the kernel files: "
                                 f"{result.failure_reason or 'no reason given'} (nothing was committed)")
    def commit() -> Any:
        _settle_editor_files(plan, absent)
        return commit_plan(plan)

    outcome = await _off_loop(commit)
    ls.runs.forget(uri, class_name, "accepted")
    short = (outcome.sha or "")[:10]
    ls.show(f"Kevin: committed {len(outcome.paths)} files for {class_name} ({short})")
    for note in plan.notes:
        ls.log(f"Kevin: {note}")
    return {"sha": outcome.sha, "paths": [str(p) for p in outcome.paths], "message": outcome.message}


def discard(ls, uri: str, class_name: str) -> dict[str, Any]:
    state = ls.runs.forget(uri, class_name, "discarded")
    return {"discarded": state.run_id if state is not None else None}


def open_kernel(ls, path: str) -> dict[str, Any]:
    target = uri_path(path) if path.startswith("file:") else Path(path)
    if target is None or not target.is_file():
        raise UserInputError(f"{path}: no such kernel file")
    ls.show_document(target, take_focus=True)
    return {"opened": str(target)}


def guarded(handler):
    """KevinError or OSError (a file that cannot be written) -> an error response with one line."""
    import functools

    if asyncio.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def run_async(*args: Any) -> Any:
            try:
                return await handler(*args)
            except (KevinError, OSError) as err:
                raise fail(err) from None
        return run_async

    @functools.wraps(handler)
    def run(*args: Any) -> Any:
        try:
            return handler(*args)
        except (KevinError, OSError) as err:
            raise fail(err) from None
    return run


COMMANDS = {
    "kevin.optimize": optimize,
    "kevin.cancel": cancel,
    "kevin.showDiff": show_diff,
    "kevin.accept": accept,
    "kevin.discard": discard,
    "kevin.openKernel": open_kernel,
}

