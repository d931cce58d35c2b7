"""The terminal UI labels a verdict the evaluator does not trust and never accepts it (issue 23)."""

from __future__ import annotations

import git
from textual.widgets import DataTable
from trust_fixtures import write_trust_replay
from tui_support import make_app, notifications, start_run, wait_for

from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.tui.screens.candidate import CandidateScreen

# trajectory 0: 5x flagged faster than the speed of light, then an older stored escaping-work flag
PLAN = {(0, 0): "flag-beyond_speed_of_light", (1, 0): "slow", (0, 1): "old-escaped_stream", (1, 1): "quick"}


def cells(app) -> list[list[str]]:
    table = app.screen.query_one("#candidates", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_untrusted_rows_details_and_accept_refusal(tmp_path):
    replay = ReplayEvaluator(write_trust_replay(tmp_path / "trust-replay.json"))
    app, root, script = make_app(tmp_path, plan=PLAN, evaluator=replay)
    async with app.run_test(size=(100, 24)) as pilot:
        await start_run(pilot, script)
        await wait_for(pilot, lambda: getattr(app.screen, "status", None) == "done", what="run done")
        rows = cells(app)
        assert [r[3] for r in rows] == ["not trusted: faster than speed of light", "correct",
                                        "not trusted: work escaped the timed stream", "correct"]
        assert rows[0][5] == "-" and rows[2][5] == "-"  # no speedup shown for what is not believed
        assert rows[3][5] == "2.00x"

        await pilot.press("enter")  # t0.0's details
        await wait_for(pilot, lambda: isinstance(app.screen, CandidateScreen), what="details")
        verdict = str(app.screen.query_one("#verdict").render())
        assert "not trusted: faster than the GPU's speed of light" in verdict
        assert "earned nothing" in verdict  # the model's feedback, shown as sent
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.id == "run", what="back on the run")

        await pilot.press("a")  # row 0: not trusted, and the TUI never forces
        await wait_for(pilot, lambda: any("not trusted" in n for n in notifications(app)), what="refusal")
        assert app.screen.id == "run" and len(list(git.Repo(root).iter_commits())) == 1
