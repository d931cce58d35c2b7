"""The pool's spares follow its host (issue 20): where workers start slower than jobs end, more
of them start ahead, within a ceiling; the sizing itself with fixed numbers, then real processes
(stand-in workers that take seconds to start)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from kevin_agent.evaluate.isolation import WorkerPool
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.spares import SpareSizer, spare_ceiling

STANDIN = Path(__file__).parent / "workers" / "standin.py"


def test_the_floor_until_a_start_and_a_job_were_seen():
    sizer = SpareSizer(3, 8)
    assert sizer.wanted() == 3
    sizer.started(11.0)
    assert sizer.wanted() == 3  # no job yet
    sizer.ran(1.0)
    assert sizer.wanted() == 8  # ceil(11 / 1) = 11, within the ceiling


def test_spares_are_the_start_over_the_job_rounded_up():
    sizer = SpareSizer(3, 8)
    for _ in range(3):
        sizer.started(3.3)
        sizer.ran(0.85)
    assert sizer.wanted() == 4  # ceil(3.88)
    fast = SpareSizer(3, 8)
    fast.started(1.0)
    fast.ran(1.0)
    assert fast.wanted() == 3  # never below the floor


def test_an_expected_job_sizes_the_spares_from_the_first_start():
    """With a job of 1 s expected, a 4.7 s start asks for 5 spares before any job ran; the first
    jobs seen (2 s each) then size them (3); an expected job under 0.25 s counts as 0.25 s."""
    sizer = SpareSizer(3, 8, expected_job_s=1.0)
    assert sizer.wanted() == 3  # no start yet
    sizer.started(4.7)
    assert sizer.wanted() == 5
    sizer.ran(2.0)
    assert sizer.wanted() == 3
    tiny = SpareSizer(1, 8, expected_job_s=0.01)
    tiny.started(1.0)
    assert tiny.wanted() == 4


def test_one_slow_start_or_instant_jobs_do_not_run_away():
    sizer = SpareSizer(2, 8)
    for seconds in (3.0, 3.0, 3.0, 40.0):
        sizer.started(seconds)
    for _ in range(3):
        sizer.ran(1.0)
    assert sizer.wanted() == 3  # the median start, not the slow one
    instant = SpareSizer(1, 8)
    instant.started(1.0)
    instant.ran(0.001)  # counts as 0.25 s
    assert instant.wanted() == 4


def test_a_pool_without_spares_keeps_none():
    sizer = SpareSizer(0, 8)
    sizer.started(10.0)
    sizer.ran(0.5)
    assert sizer.wanted() == 0


def test_the_ceiling_is_one_spare_per_two_cores_at_most_eight():
    assert spare_ceiling(3, cpus=16) == 8
    assert spare_ceiling(3, cpus=12) == 6
    assert spare_ceiling(3, cpus=2) == 3  # never below the configured spares
    assert spare_ceiling(1, cpus=64) == 8


def _spares_after_jobs(tmp_path: Path, max_spares: int | None) -> int:
    """Live spares after three quick jobs in a pool of one spare whose workers take 2 s to start."""
    pool = WorkerPool([sys.executable, str(STANDIN), "slowstart"], scratch_root=tmp_path / "scratch",
                      run_timeout_s=60.0, start_timeout_s=60.0, spares=1, max_spares=max_spares,
                      extra_env={"START_DELAY": "2.0"})
    with pool:
        pool.start_spare()
        for _ in range(3):
            result = pool.run(WorkerJob("task", "normal", Path("unset"), cache_dir=Path("/nonexistent")))
            assert result.verdict.ok, result.verdict.message
        return len(pool.spare_pids)


def test_a_pool_whose_workers_start_slowly_starts_more_ahead(tmp_path):
    """Starts of >= 2 s against jobs of well under 1 s: the spares grow to the ceiling of 4; the
    control, a pool without room to grow, keeps its one."""
    assert _spares_after_jobs(tmp_path / "grows", max_spares=4) == 4
    assert _spares_after_jobs(tmp_path / "fixed", max_spares=None) == 1



def _lane_spares_after_a_build_ahead(tmp_path: Path, told: bool) -> tuple[int, float, list[int]]:
    """(the lane pool's spares, the ahead worker's start, the ahead pool's spares) after one job in
    a pool of its own whose worker takes 2 s to start; ``told``: that pool reports its starts to
    the lane's (``on_start``), as a compile-ahead pool does."""
    lane = WorkerPool([sys.executable, str(STANDIN)], scratch_root=tmp_path / "lane", run_timeout_s=60.0,
                      start_timeout_s=60.0, spares=1, max_spares=8)
    ahead = WorkerPool([sys.executable, str(STANDIN), "slowstart"], scratch_root=tmp_path / "ahead",
                       run_timeout_s=60.0, start_timeout_s=60.0, spare=False, judge=False,
                       extra_env={"START_DELAY": "2.0"}, on_start=lane.count_start if told else None)
    with lane, ahead:
        result = ahead.run(WorkerJob("task", "normal", Path("unset"), cache_dir=Path("/nonexistent")),
                           start_next=False)
        assert result.verdict.ok, result.verdict.message
        assert result.startup_s is not None and result.startup_s >= 2.0
        return len(lane.spare_pids), result.startup_s, ahead.spare_pids


def test_a_start_in_another_pool_tops_the_lane_up_before_any_job(tmp_path):
    """A compile-ahead worker's 2 s start sizes the lane's spares at once (a job of 1 s expected:
    ceil(start / 1 s), at least 3), before any candidate ran; the ahead pool itself keeps none.
    The control, a pool that tells nobody, leaves the lane with no spare started."""
    spares, start, own = _lane_spares_after_a_build_ahead(tmp_path / "told", told=True)
    assert spares == min(8, math.ceil(start / 1.0)) and spares >= 3
    assert own == []
    assert _lane_spares_after_a_build_ahead(tmp_path / "control", told=False)[0] == 0
