"""Issue 40 on a GPU: the judge runs and reads the candidate's calls itself (``evaluate/observe``).

Each verdict of a candidate that passed in the worker now carries the judge's own time
(``timing.timed_outside``) and the worker's own median beside it (``inprocess_kernel_ms``); the
JSON-lines log (``KEVIN_GPU_LOG``) keeps both, so the agreement of the two clocks on honest kernels
is a measured figure. Work that escapes the worker's timed stream is counted by the judge's clock.
"""

from __future__ import annotations

import pytest
from gpu_helpers import CORRECT, adversarial_candidate, correct_candidate, log_record, run_job, task_source

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def observed_pool():
    """Workers whose judge observes them (``EvalSettings.observe``; off by default until this
    module passes on a GPU)."""
    from kevin_agent.evaluate.isolation import WorkerPool

    with WorkerPool(run_timeout_s=300.0, observe=True) as pool:
        yield pool


@pytest.fixture(scope="module")
def confined_observed_pool(gpu_cache_dir):
    """The same, confined as a lane confines its workers and judges (the candidate's layer grants
    no /dev/shm: the first version's interprocess events failed there on the H100)."""
    from kevin_agent.evaluate.isolation import WorkerPool
    from kevin_agent.evaluate.lanes import granted_devices_env, worker_confinement

    env = {"CUDA_CACHE_PATH": str(gpu_cache_dir / "cuda-jit"), **granted_devices_env()}
    with WorkerPool(run_timeout_s=300.0, observe=True, confine=worker_confinement("auto", gpu_cache_dir),
                    extra_env=env) as pool:
        yield pool


def test_a_confined_worker_is_observed_too(confined_observed_pool, gpu_cache_dir):
    result = run_job(confined_observed_pool, gpu_cache_dir, task_source("add"), correct_candidate("add"),
                     "observed-confined-add")
    assert result.verdict.correct, result.verdict.message + "\n" + result.stderr_tail[-800:]
    assert result.verdict.details.timing.timed_outside is True


@pytest.mark.parametrize("name", CORRECT)
def test_an_honest_kernel_is_timed_and_read_outside_its_process(observed_pool, gpu_cache_dir, name):
    result = run_job(observed_pool, gpu_cache_dir, task_source(name), correct_candidate(name), f"observed-{name}")
    verdict = result.verdict
    assert verdict.correct, verdict.message + "\n" + result.stderr_tail[-800:]
    t = verdict.details.timing
    assert t.timed_outside is True and t.outside_kernel_ms and t.outside_eager_ms, t
    assert t.outside_calls_per_batch and t.outside_calls_per_batch >= 1
    assert verdict.details.correctness.judged_calls and verdict.details.correctness.judged_calls >= 10
    assert t.speedup_vs_eager == pytest.approx(t.outside_eager_ms / t.outside_kernel_ms)
    assert t.kernel is not None and t.inprocess_kernel_ms is not None
    log_record({"event": "outside_vs_inprocess", "label": name, "outside_ms": t.kernel.median_ms,
                "inprocess_ms": t.inprocess_kernel_ms, "ratio": t.inprocess_kernel_ms / t.kernel.median_ms,
                "calls_per_batch": t.outside_calls_per_batch})


def test_work_that_escapes_the_timed_stream_is_on_the_judges_clock(observed_pool, gpu_cache_dir):
    result = run_job(observed_pool, gpu_cache_dir, task_source("add"), adversarial_candidate("side_stream"),
                     "observed-side-stream")
    verdict = result.verdict
    assert not verdict.correct, verdict.message
    if verdict.passed:  # the outputs were right: the time must not be believed
        names = {f.name for f in verdict.details.trust.flags}
        assert names & {"escaped_stream", "timing_disagrees", "late_work"}, names
        assert verdict.details.timing.timed_outside is True
