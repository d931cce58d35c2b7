"""Pilot tests of the TUI flows: scripted backend, replay evaluator, real git repositories."""

from __future__ import annotations

import socket

import git
from textual.widgets import DataTable, Input, Static, TabbedContent
from tui_support import RUN_ID, make_app, notifications, open_past_runs, shown, start_run, wait_for

from kevin_agent.store import RunStore
from kevin_agent.tui.screens.candidate import CandidateScreen
from kevin_agent.tui.screens.confirm import ConfirmScreen
from kevin_agent.tui.screens.diff import DiffScreen

KERNEL_FILES = {"models/model_cuda.py", "models/model_kernel.cu", "models/model_kernel.cpp",
                "models/test_model_cuda.py"}


def cells(app) -> list[list[str]]:
    table = app.screen.query_one("#candidates", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_browse_shows_modules_input_status_and_missing_input_hint(tmp_path):
    app, _, _ = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: bool(getattr(app.screen, "entries", None)), what="modules")
        table = app.screen.query_one("#modules", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[:2] + [r[3]] for r in rows] == [["models/add.py", "Model", "ok"],
                                                 ["models/doubler.py", "Doubler", "missing"]]
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.screen.id == "browser"  # no setup for a module without inputs
        assert any("get_inputs" in n for n in notifications(app))
        note = str(app.screen.query_one("#module-note", Static).render())
        assert "Needs example inputs" in note


async def test_run_details_accept_commit_and_undo(tmp_path):
    app, root, script = make_app(tmp_path)
    repo = git.Repo(root)
    (root / "models" / "add.py").write_text((root / "models" / "add.py").read_text() + "# wip\n")
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        rows = cells(app)
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            ("t0.0", "0", "0", "compile failed"), ("t1.0", "1", "0", "correct"),
            ("t0.1", "0", "1", "correct"), ("t1.1", "1", "1", "correctness failed")]  # ids as `kevin show` takes
        assert rows[2][5:7] == ["2.00x", "1.33x"] and rows[1][5] == "0.80x"
        assert "tokens" in str(app.screen.query_one("#progress", Static).render())

        await pilot.press("down", "down", "enter")  # t0.1, the 2.0x kernel
        await wait_for(pilot, lambda: isinstance(app.screen, CandidateScreen), what="details")
        assert shown(app).candidate.id == "t0.1"
        assert "Summary of attempt quick." in str(app.screen.query_one("#summary").render())
        assert "2.00x vs eager, 1.33x vs torch.compile" in str(app.screen.query_one("#verdict").render())
        app.screen.query_one(TabbedContent).active = "tab-cuda"
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "tab-cuda"

        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff modal")
        assert "+++ b/models/model_kernel.cu" in shown(app).plan.diff()
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n.startswith("Committed") for n in notifications(app)),
                       what="commit")
        head = repo.head.commit
        assert set(head.stats.files) == KERNEL_FILES
        assert "Kevin-Run: " + RUN_ID in head.message
        assert repo.is_dirty(path="models/add.py")  # the user's edit stays uncommitted

        accepted = repo.head.commit.hexsha
        await pilot.press("u")  # asks first, naming the commit it would revert
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="undo question")
        assert accepted[:10] in str(app.screen.query_one("#confirm-question", Static).render())
        await pilot.press("n")
        await wait_for(pilot, lambda: any("Nothing was reverted" in n for n in notifications(app)),
                       what="kept")
        assert repo.head.commit.hexsha == accepted and (root / "models" / "model_kernel.cu").exists()
        await pilot.press("u")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="undo question")
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n.startswith("Undone") for n in notifications(app)),
                       what="undo")
        assert str(repo.head.commit.message).startswith("Revert")
        assert not (root / "models" / "model_kernel.cu").exists()


async def test_discarding_the_diff_writes_nothing(tmp_path):
    app, root, script = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        await pilot.press("down", "down", "a")
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff modal")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen.id == "run", what="back on the run")
        assert not (root / "models" / "model_kernel.cu").exists()
        assert len(list(git.Repo(root).iter_commits())) == 1


async def test_accepting_a_wrong_candidate_is_refused_with_a_notification(tmp_path):
    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        await pilot.press("a")  # row 0: compile failed
        await wait_for(pilot, lambda: any("not correct" in n for n in notifications(app)),
                       what="refusal")
        assert app.screen.id == "run" and app.is_running


async def test_cancel_keeps_finished_work(tmp_path):
    plan = {(t, n): m for t in range(2) for n, m in enumerate(("slow", "quick", "fastest"))}
    app, _, script = make_app(tmp_path, plan=plan, delay_s=1.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script, turns="3")
        await wait_for(pilot, lambda: any(v is not None for _, v in shown(app).rows.values()),
                       what="a verdict")
        await pilot.press("c")
        await wait_for(pilot, lambda: shown(app).status == "cancelled", what="cancelled")
        store: RunStore = app.deps.store
        record = store.load_run(RUN_ID)
        judged = [c.id for c, v in record.candidates if v is not None]
        assert record.status == "cancelled" and judged and len(judged) < 6
        assert len(cells(app)) == len(record.candidates)


async def test_quit_during_a_run_asks_then_cancels_keeping_work(tmp_path):
    plan = {(t, n): "slow" for t in range(2) for n in range(3)}
    app, _, script = make_app(tmp_path, plan=plan, delay_s=1.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script, turns="3")
        await wait_for(pilot, lambda: bool(shown(app).rows), what="a candidate")
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="question")
        await pilot.press("n")
        await pilot.pause()
        assert app.screen.id == "run" and shown(app).running
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="question")
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running, what="exit")
    record = app.deps.store.load_run(RUN_ID)
    assert record.status == "cancelled" and record.candidates


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_bad_endpoint_shows_a_notification_and_the_app_stays_alive(tmp_path):
    app, root, script = make_app(tmp_path)
    (root / "kevin.toml").write_text("max_retries = 0\ntimeout_s = 5\nstream = false\n")
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script, backend="openai",
                        endpoint=f"http://127.0.0.1:{_closed_port()}/v1")
        await wait_for(pilot, lambda: getattr(app.screen, "status", None) == "failed", what="failure")
        assert any(n.startswith("Run failed") for n in notifications(app))
        assert "Run failed" in str(app.screen.query_one("#conclusion", Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.id == "browser", what="browser")
        assert app.is_running


async def test_invalid_setup_field_is_a_notification_not_a_crash(tmp_path):
    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: bool(getattr(app.screen, "entries", None)), what="modules")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen.id == "setup", what="setup")
        app.screen.query_one("#turns", Input).value = "zero"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen.id == "setup"
        assert any("turns must be a whole number" in n for n in notifications(app))


async def test_past_runs_open_from_the_store(tmp_path):
    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await open_past_runs(pilot, "done")
        assert shown(app).run_ids == [RUN_ID]
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen.id == "run", what="stored run")
        assert shown(app).status == "done" and len(cells(app)) == 4


async def test_command_palette_offers_the_screen_actions(tmp_path):
    from kevin_agent.tui.commands import KevinCommands

    app, _, script = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: shown(app).status == "done", what="run done")
        provider = KevinCommands(app.screen)
        names = [name for name, _, _ in provider._commands()]
        assert "Accept & commit" in names and "Quit" in names
        assert "Cancel run" not in names  # not available once the run is done
        footer = [b.binding.description for b in app.screen.active_bindings.values()]
        assert "Cancel run" not in footer and "Accept & commit" in footer  # hidden, not just dimmed
        hits = [hit async for hit in provider.search("undo")]
        assert [h.text for h in hits] == ["Undo accept"]
