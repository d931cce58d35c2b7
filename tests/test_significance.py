"""A win is a measured win: a kernel level with the faster baseline within the timing noise is a
tie in the conclusion, the commit, the editor's question and the terminal UI."""

from __future__ import annotations

import pytest
from accept_support import good_verdict, make_record

from kevin_agent.data import Candidate, TimingStats
from kevin_agent.evaluate.worker.timing import stats_from_samples
from kevin_agent.run_table import better_choice, compare_times, conclude
from kevin_agent.verdict_records import TimingRecord


def timed(median: float, low: float, high: float) -> TimingStats:
    return TimingStats(median, median, low, high, high - low, 50, low, high)


def tied_verdict():
    """The case seen on the H200: 0.256 ms against torch.compile's 0.256 ms."""
    return good_verdict(TimingRecord(kernel=timed(0.2558, 0.2551, 0.2566), compiled=timed(0.2561, 0.2553, 0.2570),
                                     eager=timed(0.401, 0.399, 0.404), speedup_vs_eager=1.57, speedup_vs_compile=1.001))


def test_intervals_decide_faster_slower_or_tie():
    assert compare_times(timed(0.40, 0.39, 0.41), timed(0.50, 0.49, 0.51)) == "faster"
    assert compare_times(timed(0.50, 0.49, 0.51), timed(0.40, 0.39, 0.41)) == "slower"
    assert compare_times(timed(0.256, 0.255, 0.257), timed(0.2561, 0.2553, 0.257)) == "tie"
    # separated intervals but under the 2% margin: still a tie
    assert compare_times(timed(0.990, 0.989, 0.991), timed(1.000, 0.999, 1.001)) == "tie"


def test_real_samples_give_intervals_that_overlap_for_equal_kernels():
    import random

    rng = random.Random(7)
    kernel = stats_from_samples([rng.gauss(0.256, 0.002) for _ in range(60)])
    compiled = stats_from_samples([rng.gauss(0.256, 0.002) for _ in range(60)])
    assert compare_times(kernel, compiled) == "tie"
    faster = stats_from_samples([rng.gauss(0.200, 0.002) for _ in range(60)])
    assert compare_times(faster, compiled) == "faster"


def test_a_tie_is_called_a_tie_in_the_conclusion_and_the_commit(tmp_path):
    from kevin_agent.accept.message import subject

    verdict = tied_verdict()
    assert better_choice(verdict.details) == "tie"
    record = make_record(tmp_path / "m.py", "code", verdict)
    conclusion = conclude(record)
    assert not conclusion.win and conclusion.better_choice == "tie"
    assert "a tie with torch.compile" in conclusion.text and "win" in conclusion.text
    assert "a win over both" not in conclusion.text
    assert "a tie with torch.compile" in subject("Block", verdict)
    win = good_verdict()
    assert better_choice(win.details) == "kernel" and "tie" not in subject("Block", win)


def test_the_editor_question_says_tie():
    from kevin_agent.data import Task
    from kevin_agent.events import RunDone, VerdictReady
    from kevin_agent.lsp.reporting import result_message
    from kevin_agent.lsp.runs import RunState

    state = RunState("file:///m.py", "Block", Task("class Model: pass", "Model"), 1, 1, status="done")
    best = (Candidate(0, 0, id="t0.0"), tied_verdict())
    state.view.apply(VerdictReady("r", *best))
    state.view.apply(RunDone("r", *best))
    assert "a tie with torch.compile, within the timing noise" in result_message(state)


@pytest.mark.timeout(600)  # a guard: the TUI run takes seconds
async def test_the_terminal_ui_says_tie(tmp_path):
    from textual.widgets import Static

    from kevin_agent.tui.app import create_app
    from kevin_agent.tui.screens.run import RunScreen

    record = make_record(tmp_path / "m.py", "code", tied_verdict())
    app = create_app(tmp_path, env={})
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(RunScreen(record=record))
        await pilot.pause(0.2)
        text = str(app.screen.query_one("#conclusion", Static).render())
        assert "a tie with torch.compile" in text


# Fixed numbers: a win needs the kernel's median interval wholly below the faster baseline's and
# the medians at least 2% apart; a run stored without timings needs speedups above 1.02x.

def test_overlapping_intervals_are_a_tie_even_when_the_medians_are_5_percent_apart():
    kernel, baseline = timed(1.00, 0.96, 1.04), timed(1.05, 1.01, 1.09)
    assert compare_times(kernel, baseline) == "tie"
    assert compare_times(baseline, kernel) == "tie"
    assert compare_times(timed(1.00, 0.96, 1.009), baseline) == "faster"  # intervals just apart
    assert compare_times(baseline, timed(1.00, 0.96, 1.009)) == "slower"
    verdict = good_verdict(TimingRecord(kernel=kernel, eager=baseline, speedup_vs_eager=1.05))
    assert better_choice(verdict.details) == "tie"
    assert not conclude(make_record(None, "code", verdict)).win


@pytest.mark.parametrize("vs_eager,vs_compile,choice", [
    (1.01, None, "eager"), (1.019, None, "eager"), (1.021, None, "kernel"), (1.03, None, "kernel"),
    (1.5, 1.01, "torch.compile"), (1.01, 1.5, "eager"), (1.5, 1.019, "torch.compile"), (1.03, 1.021, "kernel"),
])
def test_stored_without_timings_a_win_needs_more_than_1_02x(vs_eager, vs_compile, choice):
    verdict = good_verdict(TimingRecord(speedup_vs_eager=vs_eager, speedup_vs_compile=vs_compile))
    assert better_choice(verdict.details) == choice
    assert conclude(make_record(None, "code", verdict)).win is (choice == "kernel")
