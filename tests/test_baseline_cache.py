"""Baselines kept on disk across processes: the key's fields, --fresh-baselines, concurrent
processes measuring a task once, and what an evaluation reports about them (stand-in GPU workers)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from kevin_agent.commands.eval_cmd import baseline_note
from kevin_agent.data import Stage, Task, TimingStats, VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.baselines import BaselineBook, baseline_key
from kevin_agent.evaluate.lanes import DeviceInfo
from kevin_agent.evaluate.protocol import Baseline

ROOT = Path(__file__).resolve().parents[1]
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "standin.py")]
TASK = Task(source=(ROOT / "tests" / "fixtures" / "kernels" / "add_task.py").read_text(), class_name="Model")
BASE: dict[str, Any] = dict(task_source="src", gpu_name="NVIDIA H200", torch_version="2.11.0",
                            settings=EvalSettings(), cuda_version="13.0")


def stats(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 20, ms, ms)


@pytest.mark.parametrize(("field", "other"), [
    ("task_source", "src\n"), ("gpu_name", "NVIDIA H100"), ("torch_version", "2.12.0"), ("cuda_version", "12.8"),
    ("settings", EvalSettings(timing_trials=50)), ("settings", EvalSettings(warmup_trials=3)),
    ("settings", EvalSettings(with_torch_compile=False)), ("settings", EvalSettings(seed=7)),
])
def test_each_field_of_the_key_invalidates(field, other):
    assert baseline_key(**{**BASE, field: other}) != baseline_key(**BASE)


def test_settings_that_do_not_change_a_measurement_keep_the_key():
    for same in (EvalSettings(policy="partial"), EvalSettings(sandbox="off"), EvalSettings(fresh_baselines=True),
                 EvalSettings(correctness_trials=9)):
        assert baseline_key(**{**BASE, "settings": same}) == baseline_key(**BASE)


def test_fresh_measures_again_once_then_shares(tmp_path):
    measured: list[str] = []
    old = Baseline(eager=stats(2.0))

    def measure(tag: str, result: Baseline) -> Baseline:
        measured.append(tag)
        return result

    BaselineBook(tmp_path).get_or_measure("k", lambda: old)
    fresh = BaselineBook(tmp_path, fresh=True)
    got, cached = fresh.get_or_measure("k", lambda: measure("x", Baseline(eager=stats(1.0))))
    assert got is not None and (got.eager.median_ms, cached, measured) == (1.0, False, ["x"])
    assert fresh.get_or_measure("k", lambda: measure("y", old))[1] is True and measured == ["x"]
    reread = BaselineBook(tmp_path).get_or_measure("k", lambda: old)[0]
    assert reread is not None and reread.eager.median_ms == 1.0  # the fresh one is stored
    assert reread.measured_seconds is not None


def _measure_in_process(folder: str, log: str, ready: str) -> None:
    """One process of the concurrency test: wait for the others, then ask for the same key."""
    import time

    while len(os.listdir(ready)) < 4:
        time.sleep(0.01)

    def measure() -> Baseline:
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough that the other processes ask while this one measures
        return Baseline(eager=stats(1.5), gpu_name=str(os.getpid()))

    baseline, _ = BaselineBook(Path(folder)).get_or_measure("shared-key", measure)
    with open(log + ".got", "a") as out:
        out.write(json.dumps(baseline.to_dict() if baseline else None) + "\n")


def test_concurrent_processes_measure_a_task_once(tmp_path):
    log, ready = tmp_path / "measured", tmp_path / "ready"
    ready.mkdir()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_measure_in_process, args=(str(tmp_path / "book"), str(log), str(ready)))
             for _ in range(4)]
    for number, proc in enumerate(procs):
        proc.start()
        (ready / str(number)).touch()
    for proc in procs:
        proc.join(300)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    measured_by = log.read_text().split()
    got = [json.loads(line) for line in Path(str(log) + ".got").read_text().splitlines()]
    assert len(measured_by) == 1  # one process measured; the others waited and read its result
    assert {g["gpu_name"] for g in got} == set(measured_by) and len(got) == 4


def _evaluate(tmp_path: Path, settings: EvalSettings, codes: list[str]) -> list:
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.scheduling import Batch, GpuItem

    device = DeviceInfo("stand-in", "GPU-baseline-test", 0, cuda_version="13.0")
    evaluator = CudaEvaluator(settings, worker_command=STANDIN, devices=[device], spares=0)
    evaluator._arch = "9.0"
    with evaluator:
        evaluator._ensure_started()
        batch = Batch(TASK, codes, threading.Event(), None, None, None)
        for index, code in enumerate(codes):
            batch.count(on_gpu=1)
            evaluator._queue.put(GpuItem(batch, index, code, VerdictDetails()))
        return batch.wait()


def test_an_evaluation_says_whether_it_measured_the_baselines_and_how_long_it_took(tmp_path):
    settings = EvalSettings(cache_dir=tmp_path / "cache", run_timeout_s=60)
    first = _evaluate(tmp_path, settings, ["code 0"])[0]
    assert first.stage is Stage.TIMING and first.details.timing.baseline_cached is False
    assert first.details.timing.baseline_seconds is not None and first.details.timing.baseline_seconds > 0
    assert "measured this task's baselines" in (baseline_note(first) or "")
    again = _evaluate(tmp_path, settings, ["code 1"])[0]  # a new process would read the same folder
    assert again.details.timing.baseline_cached is True and again.details.timing.baseline_seconds is None
    assert baseline_note(again) is None
    fresh = _evaluate(tmp_path, EvalSettings(cache_dir=tmp_path / "cache", run_timeout_s=60, fresh_baselines=True),
                      ["code 2"])[0]
    assert fresh.details.timing.baseline_cached is False


def test_the_eval_bench_breakdown_accounts_for_the_wall():
    """bench/eval_bench.py's breakdown on fixed numbers: busy time is the union of job intervals,
    idle the rest of the wall, baseline and candidate jobs apart."""
    import importlib
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "bench"))
    eval_bench: Any = importlib.import_module("eval_bench")

    assert eval_bench.busy_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    started = 100.0
    baseline = SimpleNamespace(stage_seconds={"baseline_eager": 0.5, "baseline_compile": 2.25})
    workers = [SimpleNamespace(ended_at=112.0, seconds=4.0, baseline=baseline, waited_s=0.5),  # 8..12
               SimpleNamespace(ended_at=114.0, seconds=2.0, baseline=None, waited_s=0.0),  # 12..14
               SimpleNamespace(ended_at=120.0, seconds=3.0, baseline=None, waited_s=0.25)]  # 17..20
    rows = [{"build_s": 5.0, "stage_s": {"load": 0.5, "correctness": 0.25}}, {"build_s": None},
            {"build_s": 7.0, "stage_s": {"load": 1.5, "correctness": 0.75, "timing": 0.5}}]
    part = eval_bench.breakdown(workers, rows, started, 30.0)
    assert part["first_gpu_job_s"] == 8.0
    assert part["first_candidate_job_s"] == 12.0  # the baseline ran first, 8..12
    assert (part["gpu_busy_s"], part["gpu_idle_s"]) == (9.0, 21.0)
    assert part["gpu_idle_between_jobs_s"] == 3.0  # 14..17: the GPU waited between jobs
    assert part["timeline"] == [[8.0, 12.0], [12.0, 14.0], [17.0, 20.0]]
    assert part["worker_stage_median_s"] == {"load": 1.0, "correctness": 0.5, "timing": 0.5}
    assert (part["baseline_jobs_s"], part["candidate_gpu_stages_s"]) == (4.0, 5.0)
    assert (part["visible_worker_wait_s"], part["builds_summed_s"], part["builds"]) == (0.75, 12.0, 2)
    lines = eval_bench.render_breakdown({"header_s": 35.0, "kevin": {"wall_s": 30.0, "breakdown": part}})
    assert any("GPU idle" in line and "70.0%" in line for line in lines)
    assert "  worker stages, median s: load 1.00, correctness 0.50, timing 0.50" in lines
    assert part["baseline_stage_median_s"] == {"baseline_eager": 0.5, "baseline_compile": 2.25}
    assert "  baseline job parts, median s: baseline_eager 0.50, baseline_compile 2.25" in lines


def test_a_measurement_made_ahead_is_reported_to_the_first_claimant_only(tmp_path):
    book = BaselineBook(tmp_path)
    ahead, cached = book.get_or_measure("k", lambda: Baseline(eager=stats(2.0)), claim=False)
    assert ahead is not None and cached is False
    assert book.get_or_measure("k", lambda: None, claim=False)[1] is True  # another look ahead takes nothing
    first, first_cached = book.get_or_measure("k", lambda: None)
    assert first is ahead and first_cached is False and first.measured_seconds is not None
    assert book.get_or_measure("k", lambda: None)[1] is True  # reported once


def test_a_process_waiting_on_another_measuring_hears_so_first(tmp_path):
    """Another process holds the key's lock file (it is measuring): the caller is told, naming the
    holder, before it waits, then reads what that process stored."""
    import fcntl
    import json

    book = BaselineBook(tmp_path)
    holder = os.open(tmp_path / "k.lock", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(holder, json.dumps({"pid": 4242, "command": "kevin eval"}).encode())
    fcntl.flock(holder, fcntl.LOCK_EX)
    told: list[str] = []
    heard = threading.Event()
    got: list[Any] = []

    def hear(message: str) -> None:
        told.append(message)
        heard.set()

    asker = threading.Thread(target=lambda: got.append(book.get_or_measure("k", lambda: None, on_wait=hear,
                                                                           label="the baseline of add on H100")))
    asker.start()
    assert heard.wait(120)
    assert asker.is_alive()  # told, and still waiting for the lock
    assert told == ["waiting for the baseline of add on H100, in use by kevin eval pid 4242"]
    BaselineBook(tmp_path).put("k", Baseline(eager=stats(3.0)))  # what the other process measured
    os.close(holder)
    asker.join(120)
    (baseline, cached), = got
    assert cached is True and baseline is not None and baseline.eager.median_ms == 3.0


def test_a_cancel_ends_the_wait_for_another_process_measuring(tmp_path):
    """Ctrl-C (the batch's cancel) while another process measures the key: no measurement, no
    result, and the wait ends; the key stays free for the holder."""
    import fcntl

    holder = os.open(tmp_path / "k.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    cancel, measured = threading.Event(), []
    got: list[Any] = []
    asker = threading.Thread(target=lambda: got.append(BaselineBook(tmp_path).get_or_measure(
        "k", lambda: measured.append(1), cancel=cancel, on_wait=lambda message: cancel.set())))
    asker.start()
    asker.join(120)
    assert not asker.is_alive() and got == [(None, False)] and measured == []
    os.close(holder)


def test_an_unlocked_key_says_nothing_about_waiting(tmp_path):
    told: list[str] = []
    BaselineBook(tmp_path).get_or_measure("k", lambda: Baseline(eager=stats(1.0)), on_wait=told.append)
    assert told == []


def test_a_batch_measures_its_baseline_while_its_candidates_compile(tmp_path):
    """The lane measures the task's baseline while the batch's builds run (the stand-in compiler
    holds every build until then), and the first candidate still reports that it was measured."""
    import time

    from kevin_agent.evaluate.build.compile import CompileOutcome
    from kevin_agent.evaluate.evaluator import CudaEvaluator

    good = (ROOT / "tests" / "fixtures" / "kernels" / "add_candidate.py").read_text()
    baselines_when_built: list[int] = []
    queue_sizes: list[tuple[int, int]] = []

    def compiler(code: str, cache: Any, cancel: threading.Event) -> CompileOutcome:
        stop = time.monotonic() + 120
        while not evaluator.last_baseline_results and time.monotonic() < stop:
            time.sleep(0.01)
        baselines_when_built.append(len(evaluator.last_baseline_results))
        return CompileOutcome(True, "")

    device = DeviceInfo("stand-in", "GPU-prefetch-test", 0, cuda_version="13.0")
    settings = EvalSettings(cache_dir=tmp_path / "cache", run_timeout_s=60)
    evaluator = CudaEvaluator(settings, worker_command=STANDIN, devices=[device], spares=0, compiler=compiler, jobs=2)
    evaluator._arch = "9.0"
    with evaluator:
        verdicts = evaluator.evaluate(TASK, [good + "\n# standin: normal\n", good + "\n# standin: normal\n\n"],
                                      on_queue=lambda c, g: queue_sizes.append((c, g)))
    assert baselines_when_built == [1, 1]  # each build ended after the baseline was measured
    assert [v.stage for v in verdicts] == [Stage.TIMING, Stage.TIMING]
    reports = sorted((v.details.timing.baseline_cached, v.details.timing.baseline_seconds is None) for v in verdicts)
    assert reports == [(False, False), (True, True)]  # one candidate reports the measurement, with its seconds
    assert queue_sizes[0] == (2, 0) and queue_sizes[-1] == (0, 0)  # the baseline job is no queued candidate
    assert min(min(c, g) for c, g in queue_sizes) >= 0
