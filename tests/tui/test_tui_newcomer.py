"""Pilot tests of what a newcomer meets in the TUI: accepted drop-ins in the browser, undo that
asks first, continuing an unfinished run from the past-runs screen, replayed verdicts labelled."""

from __future__ import annotations

import json

import git
from loop_fixtures import write_replay
from textual.widgets import DataTable, Static
from tui_support import RUN_ID, make_app, notifications, open_past_runs, shown, start_run, wait_for

from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.runs.locks import RunLock
from kevin_agent.store import RunStore
from kevin_agent.tui.screens.confirm import ConfirmScreen
from kevin_agent.tui.screens.diff import DiffScreen
from kevin_agent.tui.screens.run import RunScreen


def browser_rows(app) -> list[list[str]]:
    table = app.screen.query_one("#modules", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def _accept_best(pilot) -> None:
    """On a finished run screen: accept t0.1 (the 2.0x kernel) and commit it."""
    app = pilot.app
    await pilot.press("down", "down", "a")
    await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff modal")
    await pilot.press("y")
    await wait_for(pilot, lambda: any(n.startswith("Committed") for n in notifications(app)),
                   what="commit")


async def test_accepted_drop_in_is_listed_as_the_kernel_of_its_original(tmp_path):
    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        await _accept_best(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.id == "browser" and len(shown(app).entries) == 3,
                       what="rescanned browser")
        rows = browser_rows(app)
        drop_in = next(r for r in rows if r[1] == "ModelCUDA")
        assert drop_in[0] == "models/model_cuda.py"
        assert drop_in[3] != "missing" and drop_in[4] == "kernel of Model"
        original = next(r for r in rows if r[1] == "Model")
        assert original[3] == "ok" and original[4] == "2.00x"  # the accepted kernel's speedup

        index = rows.index(drop_in)
        app.screen.query_one("#modules", DataTable).move_cursor(row=index)
        await pilot.pause()
        note = str(app.screen.query_one("#module-note", Static).render())
        assert "accepted kernel of models/add.py::Model" in note and "example inputs" not in note
        await pilot.press("enter")  # not a module to optimize: goes to the original instead
        await pilot.pause()
        assert app.screen.id == "browser"
        assert shown(app).selected.module.name == "Model" and not shown(app).selected.drop_in_of


async def test_undo_asks_first_and_no_keeps_the_commit(tmp_path):
    app, root, script = make_app(tmp_path)
    repo = git.Repo(root)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        await _accept_best(pilot)
        accepted = repo.head.commit
        await pilot.press("u")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="undo question")
        question = str(app.screen.query_one("#confirm-question", Static).render())
        assert accepted.hexsha[:10] in question and "kevin: CUDA kernel for Model" in question
        await pilot.press("escape")  # Esc answers no
        await wait_for(pilot, lambda: any("Nothing was reverted" in n for n in notifications(app)),
                       what="kept")
        assert repo.head.commit == accepted


async def test_undo_without_a_kevin_commit_says_so_and_asks_nothing(tmp_path):
    app, _, _ = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: bool(getattr(app.screen, "entries", None)), what="modules")
        await pilot.press("u")
        await wait_for(pilot, lambda: any("no kevin-agent commit" in n for n in notifications(app)),
                       what="refusal")
        assert not isinstance(app.screen, ConfirmScreen)


async def _cancelled_run(pilot, script) -> None:
    """Start a 2 x 3 run, cancel it after the first verdict, back to the past-runs screen."""
    app = pilot.app
    await start_run(pilot, script, turns="3")
    await wait_for(pilot, lambda: any(v is not None for _, v in shown(app).rows.values()),
                   what="a verdict")
    await pilot.press("c")
    await open_past_runs(pilot, "cancelled")


PLAN_2x3 = {(t, n): m for t in range(2) for n, m in enumerate(("slow", "quick", "fastest"))}


async def test_continue_a_cancelled_run_from_past_runs(tmp_path):
    app, _, script = make_app(tmp_path, plan=PLAN_2x3, delay_s=0.6)
    store: RunStore = app.deps.store
    async with app.run_test(size=(80, 24)) as pilot:
        await _cancelled_run(pilot, script)
        before = store.load_run(RUN_ID)
        assert before.status == "cancelled" and len(before.candidates) < 6
        await pilot.press("c")  # continue the selected (only) run
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.request is not None
                       and app.screen.request.resume == RUN_ID, what="resumed run screen")
        await wait_for(pilot, lambda: getattr(app.screen, "status", None) == "done", what="resumed run done")
        assert any(n.startswith("Resumed") for n in notifications(app))
        after = store.load_run(RUN_ID)
        assert after.status == "done" and len(after.candidates) == 6
        assert {c.id for c, _ in before.candidates if _ is not None} <= {c.id for c, _ in after.candidates}
        assert len(shown(app).rows) == 6 and shown(app).run_id == RUN_ID


async def test_continue_is_refused_while_another_process_plays_the_run(tmp_path):
    app, _, script = make_app(tmp_path, plan=PLAN_2x3, delay_s=0.6)
    store: RunStore = app.deps.store
    async with app.run_test(size=(80, 24)) as pilot:
        await _cancelled_run(pilot, script)
        other = RunLock.take(store, RUN_ID)  # another kevin process plays it
        try:
            await pilot.press("c")
            await wait_for(pilot, lambda: any("already being played by another kevin process" in n
                                              for n in notifications(app)), what="refusal")
            assert store.load_run(RUN_ID).status == "cancelled" and app.is_running
        finally:
            other.release()


async def test_continue_a_done_run_says_it_is_done(tmp_path):
    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await open_past_runs(pilot, "done")
        await pilot.press("c")
        await wait_for(pilot, lambda: any("already done" in n for n in notifications(app)), what="note")
        assert app.screen.id == "runs"


def _recorded_on_h200(tmp_path) -> ReplayEvaluator:
    """The fixtures' verdicts as a recording made on an H200 in run rec-1."""
    path = write_replay(tmp_path / "recorded.json")
    raw = json.loads(path.read_text())
    for verdict in raw["by_marker"].values():
        verdict["details"]["environment"].update(gpu_name="NVIDIA H200", measured_in="rec-1")
    path.write_text(json.dumps(raw))
    return ReplayEvaluator(path)


async def test_replayed_verdicts_are_labelled_on_the_run_and_candidate_screens(tmp_path):
    app, _, script = make_app(tmp_path, evaluator=_recorded_on_h200(tmp_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        conclusion = str(app.screen.query_one("#conclusion", Static).render())
        assert "measured on NVIDIA H200 in run rec-1, replayed here" in conclusion
        progress = str(app.screen.query_one("#progress", Static).render())
        assert "turn 1 (0-1)" in progress  # 0-based, like the candidate ids
        await pilot.press("down", "down", "enter")
        await wait_for(pilot, lambda: app.screen.id == "candidate", what="details")
        verdict = str(app.screen.query_one("#verdict").render())
        assert "measured on NVIDIA H200 in run rec-1, replayed here" in verdict
        assert "not measured on this machine" in verdict
