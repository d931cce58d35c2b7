"""The pool's spares follow its host (issue 20): where workers start slower than jobs end, more
of them start ahead, within a ceiling; the sizing itself with fixed numbers, then real processes
(stand-in workers that take seconds to start)."""

from __future__ import annotations

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

