"""Snapshot tests of the main screens at 80 x 24 (pytest-textual-snapshot; SVGs committed under
tests/tui/__snapshots__). Update them with `pytest tests/tui --snapshot-update` after a deliberate
change. Rendering is deterministic: injected run id, replayed verdicts, scripted replies."""

from __future__ import annotations

from tui_support import make_app, settle, start_run, wait_for

from kevin_agent.tui.screens.candidate import CandidateScreen
from kevin_agent.tui.screens.diff import DiffScreen

SIZE = (80, 24)


async def _browser_ready(pilot) -> None:
    await wait_for(pilot, lambda: bool(getattr(pilot.app.screen, "entries", None)), what="modules")


def test_browser_screen(snap_compare, tmp_path):
    app, _, _ = make_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=_browser_ready)


def _finished_run(script):
    async def run_before(pilot) -> None:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: pilot.app.screen.status == "done", what="run done")
        await pilot.press("down", "down")
        await settle(pilot)
    return run_before


def test_live_run_screen_with_rows(snap_compare, tmp_path):
    app, _, script = make_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=_finished_run(script))


def test_candidate_detail_screen(snap_compare, tmp_path):
    app, _, script = make_app(tmp_path)

    async def run_before(pilot) -> None:
        await _finished_run(script)(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, CandidateScreen), what="details")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_candidate_cuda_tab(snap_compare, tmp_path):
    app, _, script = make_app(tmp_path)

    async def run_before(pilot) -> None:
        await _finished_run(script)(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, CandidateScreen), what="details")
        pilot.app.screen.query_one("#candidate-tabs").active = "tab-cuda"
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_diff_modal(snap_compare, tmp_path):
    app, _, script = make_app(tmp_path)

    async def run_before(pilot) -> None:
        await _finished_run(script)(pilot)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, DiffScreen), what="diff modal")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
