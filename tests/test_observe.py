"""Issue 40: the candidate's calls run on inputs the judge makes and read by the judge, on the CPU.

A stand-in worker (tests/workers/observed_standin.py) always claims a passing, fast verdict and
writes an honest witness, as candidate code that tampered with every in-process check would; the
real judge process observes it through the real channel (``observe.served`` on the worker's side,
the CPU stand-in transport: shared files instead of CUDA IPC, the judge's ``perf_counter`` instead
of its CUDA events). Each attack has its control: the same stand-in, honest.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_judge_process import TASK  # the same small task the witness tests judge

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.isolation import DEFAULT_JUDGE_COMMAND, WorkerPool
from kevin_agent.evaluate.observe.report import Observation, observed_verdict
from kevin_agent.evaluate.observe.wire import Channel, ChannelError, read_leaf
from kevin_agent.evaluate.protocol import Baseline, WorkerJob
from kevin_agent.verdict_records import LATE_WORK, TIMING_DISAGREES, TimingStats

STANDIN = Path(__file__).parent / "workers" / "observed_standin.py"


def _stats(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 10)


def run_observed(tmp_path: Path, mode: str, observe: bool = True) -> Verdict:
    settings = EvalSettings(seed=7, correctness_trials=2)
    baseline = Baseline(eager=_stats(1.0), compiled=_stats(0.5))
    with WorkerPool([sys.executable, str(STANDIN)], scratch_root=tmp_path / "scratch", spares=0,
                    run_timeout_s=120.0, start_timeout_s=120.0, judge_command=DEFAULT_JUDGE_COMMAND,
                    judge_timeout_s=120.0, observe=observe) as pool:
        return pool.run(WorkerJob(TASK, mode, Path("unset"), settings=settings, baseline=baseline)).verdict


@pytest.mark.parametrize("mode", ["honest", "static"])
def test_an_honest_candidate_observed_outside_passes_with_the_judges_time(tmp_path: Path, mode: str) -> None:
    """``static``: every call returns one buffer (a CUDA graph's output): the judge sees the calls
    share memory in its warm-up and has the worker copy each call's outputs from then on."""
    verdict = run_observed(tmp_path, mode)
    assert verdict.passed and verdict.stage == Stage.TIMING, verdict.message
    t = verdict.details.timing
    assert t.timed_outside is True and t.outside_calls_per_batch and t.outside_calls_per_batch >= 1
    assert t.outside_kernel_ms is not None and t.outside_eager_ms is not None
    # the speedup is the judge's own ratio, not the 2.00x the worker claimed
    assert t.speedup_vs_eager == pytest.approx(t.outside_eager_ms / t.outside_kernel_ms)
    assert t.speedup_vs_eager is not None and t.speedup_vs_compile == pytest.approx(t.speedup_vs_eager / 0.5)
    assert t.inprocess_kernel_ms == 0.5
    assert verdict.details.correctness.judged_calls and verdict.details.correctness.judged_calls > 4


@pytest.mark.parametrize("mode,words", [
    ("wrong", "observed outside your process"),
    ("sometimes", "observed outside your process"),
    ("shape", "observed outside your process"),
    ("precomputed", "observed outside your process"),
    ("raises", "an observed call failed"),
    ("silent", "could not run and read your calls"),
])
def test_what_the_judge_reads_itself_decides_though_the_worker_claims_a_pass(tmp_path: Path, mode: str,
                                                                             words: str) -> None:
    verdict = run_observed(tmp_path, mode)
    assert not verdict.passed and verdict.stage == Stage.CORRECTNESS
    assert words in (verdict.details.error or "") + verdict.message


def test_a_worker_claiming_a_faster_time_than_observed_is_not_trusted(tmp_path: Path) -> None:
    verdict = run_observed(tmp_path, "slow-claim")
    assert verdict.stage == Stage.TIMING
    assert TIMING_DISAGREES in [f.name for f in verdict.details.trust.flags], verdict.message
    assert verdict.details.timing.outside_kernel_ms and verdict.details.timing.outside_kernel_ms >= 2.5


def test_control_without_observation_the_same_wrong_worker_passes_on_its_witness(tmp_path: Path) -> None:
    """The wrong stand-in's witness is honest: only the observation catches it."""
    verdict = run_observed(tmp_path, "wrong", observe=False)
    assert verdict.passed, verdict.message


def _observation(**kw: object) -> Observation:
    base = {"calls": 12, "kernel_ms": [0.5, 0.5, 0.6], "eager_ms": [1.0, 1.0, 1.0], "calls_per_batch": 4,
            "kernel_stats": _stats(0.5)}
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def _passed(kernel_ms: float = 0.5) -> Verdict:
    details = VerdictDetails()
    details.timing.eager, details.timing.kernel = _stats(2.0), _stats(kernel_ms)
    return Verdict(Stage.TIMING, True, "Your answer was correct, with a speedup of 4.00x\ntable", details)


def test_the_judges_time_is_scaled_into_the_baselines_units() -> None:
    verdict = observed_verdict(_passed(kernel_ms=1.0), _observation(), compile_ratio=0.8)
    t = verdict.details.timing
    assert t.kernel is not None and t.kernel.median_ms == pytest.approx(1.0)  # 0.5 x (2.0 / 1.0)
    assert t.speedup_vs_eager == pytest.approx(2.0) and t.speedup_vs_compile == pytest.approx(2.5)
    assert verdict.message.startswith("Your answer was correct, with a speedup of 2.00x") and "table" in verdict.message


@pytest.mark.parametrize("claimed,flagged", [(0.79, True), (0.81, False), (5.0, False)])
def test_the_in_process_claim_is_a_cross_check_at_a_fixed_floor(claimed: float, flagged: bool) -> None:
    verdict = observed_verdict(_passed(kernel_ms=claimed), _observation(kernel_ms=[0.5]), compile_ratio=None)
    names = [f.name for f in verdict.details.trust.flags]
    assert (TIMING_DISAGREES in names) is flagged
    assert verdict.correct is not flagged


def test_late_work_makes_the_verdict_untrusted() -> None:
    verdict = observed_verdict(_passed(), _observation(late_work="reading took 9 ms"), compile_ratio=None)
    assert LATE_WORK in [f.name for f in verdict.details.trust.flags] and not verdict.correct


@pytest.mark.parametrize("seen", [None, Observation(error="the peer closed the channel"), Observation(calls=0)])
def test_no_observation_fails_closed(seen: Observation | None) -> None:
    verdict = observed_verdict(_passed(), seen, compile_ratio=None)
    assert not verdict.passed and verdict.stage == Stage.CORRECTNESS


@pytest.mark.parametrize("raw,words", [
    ("[1]", "not a JSON object"),
    ("nope", "not JSON"),
    ("", "closed"),
])
def test_the_channel_reads_hostile_lines_as_errors(raw: str, words: str) -> None:
    read_fd, write_fd = os.pipe()
    if raw:
        os.write(write_fd, (raw + "\n").encode())
    os.close(write_fd)
    with pytest.raises(ChannelError, match=words):
        Channel(read_fd, -1).receive(5.0)
    os.close(read_fd)


def test_a_line_over_the_limit_is_refused_without_reading_on() -> None:
    read_fd, write_fd = os.pipe()
    channel = Channel(read_fd, write_fd)
    with pytest.raises(ChannelError, match="limit"):
        channel.send({"op": "x", "pad": "a" * (1024 * 1024)})
    os.close(read_fd)
    os.close(write_fd)


@pytest.mark.parametrize("leaf,words", [
    ({"handle": "../etc", "offset": 0, "dtype": "float32", "shape": [1]}, "handle"),
    ({"handle": "ok", "offset": 0, "dtype": "object", "shape": [1]}, "dtype"),
    ({"handle": "ok", "offset": -1, "dtype": "float32", "shape": [1]}, "offset"),
    ({"handle": "ok", "offset": 0, "dtype": "float32", "shape": [True]}, "size"),
    ({"handle": "ok", "offset": 0, "dtype": "float32", "shape": [1] * 13}, "shape"),
    ({"handle": "ok", "offset": 0, "dtype": "float32", "shape": [1 << 30, 1 << 30]}, "too many"),
])
def test_a_tensor_description_is_read_as_hostile_input(leaf: dict[str, object], words: str) -> None:
    with pytest.raises(ChannelError, match=words):
        read_leaf(json.loads(json.dumps(leaf)), lambda h: h == "ok")


@pytest.mark.parametrize("raw,expected", [("on", True), ("1", True), ("off", False), ("false", False)])
def test_observation_is_switched_by_kevin_observe(raw: str, expected: bool) -> None:
    from kevin_agent.config import resolve_eval_settings

    assert resolve_eval_settings(None, {"KEVIN_OBSERVE": raw}, None) == {"observe": expected}


def test_a_bad_kevin_observe_is_one_line_naming_it() -> None:
    from kevin_agent.config import resolve_eval_settings
    from kevin_agent.errors import UserInputError

    with pytest.raises(UserInputError, match="KEVIN_OBSERVE"):
        resolve_eval_settings(None, {"KEVIN_OBSERVE": "maybe"}, None)


def test_a_lane_observes_only_when_the_settings_ask() -> None:
    from kevin_agent.evaluate.isolation import WorkerPool

    with WorkerPool() as default, WorkerPool(observe=True) as observing:
        assert default.observe is False and observing.observe is True
