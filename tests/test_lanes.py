"""Lanes, the GPU lease and baselines, on this CPU machine: several fake devices served by
stand-in workers (real processes speaking the worker protocol), real lease files, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kevin_agent.data import Stage, Task, TimingStats
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.baselines import BaselineBook, baseline_key, drift
from kevin_agent.evaluate.lanes import DeviceInfo, LocalLane, run_limit
from kevin_agent.evaluate.lease import GpuLease
from kevin_agent.evaluate.protocol import Baseline, WorkerJob
from kevin_agent.verdict_records import EnvironmentRecord, TimingRecord

ROOT = Path(__file__).resolve().parents[1]
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "standin.py")]
TASK = Task(source=(ROOT / "tests" / "fixtures" / "kernels" / "add_task.py").read_text(), class_name="Model")

HOLDER = """
import sys, time
from pathlib import Path
from kevin_agent.evaluate.lease import GpuLease
lease = GpuLease("GPU-test", "GPU 0", Path(sys.argv[1]))
with lease.hold() as held:
    print("held", flush=True)
    time.sleep(600)
"""


def stats(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 20, ms, ms)


def start_holder(folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_the_lease_waits_names_the_holder_and_takes_over_from_a_killed_one(tmp_path):
    holder = start_holder(tmp_path)
    lease = GpuLease("GPU-test", "GPU 0", tmp_path)
    messages: list[str] = []
    acquired = threading.Event()

    def wait_for_it() -> None:
        with lease.hold(on_wait=messages.append) as held:
            assert held
            acquired.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    deadline = time.monotonic() + 300  # a guard: the waiter says so within milliseconds
    while not messages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not acquired.is_set()  # the other process holds the GPU
    assert messages == [f"waiting for GPU 0, in use by python pid {holder.pid}"]
    holder.send_signal(signal.SIGKILL)  # dies without letting go: the kernel drops its lock
    holder.wait(120)  # guards: the kernel drops the lock at once
    assert acquired.wait(120)
    waiter.join(120)


def test_a_lease_wait_gives_up_on_cancel(tmp_path):
    holder = start_holder(tmp_path)
    try:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        with GpuLease("GPU-test", "GPU 0", tmp_path).hold(cancel) as held:
            assert held is False
        assert time.monotonic() - started < 60  # cancel ended the wait (the holder holds for 600 s)
    finally:
        holder.kill()
        holder.wait(10)


def test_two_lanes_of_two_processes_never_overlap_on_one_gpu(tmp_path):
    """Two evaluator processes' lanes on the same device UUID: their GPU stages serialize."""
    device = DeviceInfo("stand-in", "GPU-shared", 0)
    settings = EvalSettings(run_timeout_s=30)
    lanes = [LocalLane(device, settings, worker_command=STANDIN, spares=1, lease_folder=tmp_path,
                       extra_env={"START_DELAY": "0"}) for _ in range(2)]
    spans: list[tuple[float, float]] = []

    def run(lane: LocalLane) -> None:
        job = WorkerJob(TASK.source, "sleep1 # standin: sleep", Path("unset"), settings)
        started = time.monotonic()
        result = lane.run(job)
        spans.append((started, time.monotonic()))
        assert result.verdict.ok and result.verdict.details.environment.lane == "cuda:0"

    try:
        threads = [threading.Thread(target=run, args=(lane,)) for lane in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for lane in lanes:
            lane.close()
    assert len(spans) == 2
    assert max(end for _, end in spans) - min(start for start, _ in spans) >= 2.0  # one after the other


def test_a_confined_lane_lists_the_device_nodes_for_its_workers(tmp_path):
    """The worker cannot list /dev under its start-up layer: the lane lists the GPU's device
    nodes here and hands them to every worker for its candidate layer."""
    from kevin_agent.evaluate.sandbox.policy import DEVICES_ENV, device_paths

    lane = LocalLane(DeviceInfo("stand-in", "GPU-devices", 0), EvalSettings(sandbox="auto"), spares=0,
                     lease_folder=tmp_path, cache_dir=tmp_path / "cache")
    try:
        assert lane.pool.confine is not None
        assert lane.pool.extra_env[DEVICES_ENV].split(os.pathsep) == device_paths(gpu=True)
    finally:
        lane.close()


def test_candidates_spread_over_several_fake_gpus(tmp_path):
    from kevin_agent.evaluate.evaluator import CudaEvaluator

    devices = [DeviceInfo("stand-in", f"GPU-fake-{i}", i) for i in range(3)]
    settings = EvalSettings(compile_only=False, cache_dir=tmp_path / "cache", run_timeout_s=30)
    evaluator = CudaEvaluator(settings, worker_command=STANDIN, devices=devices, spares=1)
    evaluator._arch = "9.0"
    codes = [f"code {i} # standin: sleep" for i in range(6)]
    with evaluator:
        evaluator._ensure_started()
        verdicts = _run_gpu_only(evaluator, codes)
    lanes = [v.details.environment.lane for v in verdicts]
    assert all(v.stage is Stage.TIMING and v.ok for v in verdicts)
    assert set(lanes) == {"cuda:0", "cuda:1", "cuda:2"}  # every GPU got work
    assert {v.details.environment.gpu_uuid for v in verdicts} == {d.uuid for d in devices}


def _run_gpu_only(evaluator, codes):
    """Feed compiled-looking items straight to the lanes (the stand-in ignores the build)."""
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.scheduling import Batch, GpuItem

    batch = Batch(TASK, codes, threading.Event(), None, None, None)
    for index, code in enumerate(codes):
        batch.count(on_gpu=1)
        evaluator._queue.put(GpuItem(batch, index, code, VerdictDetails()))
    return batch.wait()


def test_baseline_keys_and_the_book(tmp_path):
    settings = EvalSettings()
    key = baseline_key(TASK.source, "NVIDIA H200", "2.11.0", settings)
    assert key == baseline_key(TASK.source, "NVIDIA H200", "2.11.0", settings)
    assert key != baseline_key(TASK.source + "\n", "NVIDIA H200", "2.11.0", settings)  # shapes live here
    assert key != baseline_key(TASK.source, "NVIDIA H100", "2.11.0", settings)
    assert key != baseline_key(TASK.source, "NVIDIA H200", "2.12.0", settings)
    assert key != baseline_key(TASK.source, "NVIDIA H200", "2.11.0", EvalSettings(with_torch_compile=False))
    assert key == baseline_key(TASK.source, "NVIDIA H200", "2.11.0", EvalSettings(policy="partial"))

    measured = []
    book = BaselineBook(tmp_path)
    baseline = Baseline(eager=stats(1.2), compiled=stats(0.8), gpu_name="NVIDIA H200")

    def measure(mark: int) -> Baseline:
        measured.append(mark)
        return baseline

    first = book.get_or_measure(key, lambda: measure(1))
    again = BaselineBook(tmp_path).get_or_measure(key, lambda: measure(2))  # from disk
    assert measured == [1] and first == (baseline, False) and again[1] is True
    assert again[0] is not None and getattr(again[0].compiled, "median_ms", None) == 0.8
    moved = drift(baseline, Baseline(eager=stats(1.26), compiled=stats(0.8), gpu_name="NVIDIA H200"))
    assert moved.text() == "baselines re-measured at the end on NVIDIA H200: eager +5.0%, torch.compile +0.0%"


def test_a_baseline_measured_a_minute_ago_is_not_measured_again_at_the_end(monkeypatch, tmp_path):
    """The end-of-run drift check costs a GPU job per task: skipped for a baseline this evaluator
    measured under two minutes ago (a one-answer bench), kept for older or stored ones."""
    from types import SimpleNamespace

    from kevin_agent.evaluate import evaluator as module

    monkeypatch.setenv("KEVIN_BUILD_CACHE", str(tmp_path))  # where the re-measured baseline is stored
    evaluator = module.CudaEvaluator(EvalSettings(compile_only=True))
    lane = SimpleNamespace(up=True, device=SimpleNamespace(name="NVIDIA H200", torch_version="2.14.1",
                                                           cuda_version="13.0"))
    used = Baseline(eager=stats(1.0), compiled=stats(0.8), gpu_name="NVIDIA H200")
    measured: list[str] = []

    def measure(lane: object, task: Task, cancel: object, on_wait: object) -> Baseline:
        measured.append(task.class_name)
        return Baseline(eager=stats(1.1), compiled=stats(0.8), gpu_name="NVIDIA H200")

    monkeypatch.setattr(evaluator, "_measure", measure)
    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    evaluator._used[(TASK.source, "NVIDIA H200")] = (lane, used, 1000.0 - 60)  # type: ignore[assignment]
    assert evaluator.remeasure(TASK) == [] and measured == []
    clock[0] = 1000.0 + 61  # two minutes after it was measured
    assert [d.text() for d in evaluator.remeasure(TASK)] == [
        "baselines re-measured at the end on NVIDIA H200: eager +10.0%, torch.compile +0.0%"]
    evaluator._used[(TASK.source, "NVIDIA H200")] = (lane, used, None)  # type: ignore[assignment]
    clock[0] = 1000.0  # a stored baseline (measured by another process, at some time) is always checked
    assert len(evaluator.remeasure(TASK)) == 1 and measured == ["Model", "Model"]


def test_the_run_limit_follows_the_reference():
    settings = EvalSettings(run_timeout_s=180)
    small = Baseline(eager=stats(0.05), compiled=stats(0.04))
    big = Baseline(eager=stats(400.0))
    assert run_limit(settings, small) < 25  # a hang on a small task costs seconds, not minutes
    assert run_limit(settings, big) == 180
    assert run_limit(settings, None) == 180


def test_speedups_are_compared_only_on_the_same_gpu_model():
    from kevin_agent.data import Candidate, Verdict, VerdictDetails
    from kevin_agent.run_record import RunRecord

    def timed(cid: str, gpu: str, speedup: float):
        details = VerdictDetails(
            timing=TimingRecord(speedup_vs_eager=speedup, kernel=stats(1.0)),
            environment=EnvironmentRecord(gpu_name=gpu),
        )
        return Candidate(0, 0, id=cid), Verdict(Stage.TIMING, True, "ok", details)

    record = RunRecord("r", TASK, {}, "done", "now", [
        timed("t0.0", "NVIDIA H200", 1.5), timed("t1.0", "NVIDIA H200", 1.2),
        timed("t2.0", "NVIDIA A10G", 4.0)])  # a slower GPU makes bigger speedups: never compared
    assert record.gpu_name == "NVIDIA H200"
    best = record.best()
    assert best is not None and best[0].id == "t0.0"
    assert {gpu: best[0].id for gpu, best in record.best_by_gpu().items()} == {
        "NVIDIA H200": "t0.0", "NVIDIA A10G": "t2.0"}
