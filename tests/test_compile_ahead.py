"""torch.compile of a baseline's reference built ahead, off the GPU's lease (issue 20).

On the CPU: the worker's compile-ahead job really builds with Inductor (its CPU backend) and runs
nothing, and a fresh process's ``torch.compile`` of the same reference then comes from the caches;
with stand-in workers: the evaluator starts the job beside the builds, without the lease,
once per task, before the baseline job, and a lane that cannot (or a job that fails) costs nothing
but the head start. The GPU side of the same path: tests/gpu/test_gpu_worker.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from kevin_agent.data import Stage, Task
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.build.compile import CompileOutcome
from kevin_agent.evaluate.evaluator import CudaEvaluator
from kevin_agent.evaluate.lanes import DeviceInfo, LocalLane
from kevin_agent.evaluate.lease import GpuLease
from kevin_agent.evaluate.protocol import CompiledAhead, WorkerJob, WorkerReply

ROOT = Path(__file__).resolve().parents[1]
STANDIN = str(ROOT / "tests" / "workers" / "standin.py")
TASK = Task(source=(ROOT / "tests" / "fixtures" / "kernels" / "add_task.py").read_text(), class_name="Model")
GOOD = (ROOT / "tests" / "fixtures" / "kernels" / "add_candidate.py").read_text()  # passes the static checks


def code(tag: str = "") -> str:
    """A candidate the stand-in worker passes (``tag`` makes another source)."""
    return GOOD + f"\n# standin: normal {tag}\n"

# -- the worker's job, with Inductor on the CPU -----------------------------------------------

CPU_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)) * 2.0

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
"""

STEPS = ROOT / "tests" / "compile_cache_steps.py"  # one step per fresh process, as each worker is one


def _step(step: str, tmp_path: Path, cache: Path) -> dict[str, Any]:
    scratch = tmp_path / f"{step}-{time.monotonic_ns()}"
    scratch.mkdir()
    source = tmp_path / "task.py"
    source.write_text(CPU_TASK)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(cache),
               TORCHINDUCTOR_COMPILE_THREADS="1", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(STEPS), step, str(scratch), str(source), "cpu"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_compile_ahead_job_builds_without_running_and_the_baseline_job_loads_its_build(tmp_path):
    from compile_cache_steps import differing_components

    cache = tmp_path / "inductor"
    ahead = _step("ahead", tmp_path, cache)
    assert ahead["ok"] is True, ahead
    assert ahead["ran"] == 0  # the compiled graph was refused, and the reference never ran eagerly
    assert ahead["parts"]["baseline_compile_ahead"] > 0
    measured = _step("measure", tmp_path, cache)
    assert measured["timed"] is True and measured["hit"] is True, measured
    assert ahead["keys"] and differing_components(ahead["keys"], measured["keys"]) == []  # the same cache keys


def test_without_the_job_ahead_the_baseline_job_builds_itself(tmp_path):
    """The control: a cold cache is a miss, so ``hit`` above is the job ahead's doing."""
    measured = _step("measure", tmp_path, tmp_path / "inductor")
    assert measured["timed"] is True and measured["hit"] is False, measured


def test_the_worker_that_built_ahead_times_that_build_and_compiles_nothing_more(tmp_path):
    """One process, as a kept worker: the build ahead runs nothing; the baseline job's first call of
    torch.compile then runs that build (``hit`` None: no cache was looked up, nothing compiled) and
    it is timed; its seconds include the build's. The control is the cold ``measure`` step, whose
    first call builds (a miss)."""
    kept = _step("kept", tmp_path, tmp_path / "inductor")
    assert kept["ok"] is True and kept["built"] is True and kept["ran_ahead"] == 0, kept
    assert kept["timed"] is True and kept["hit"] is None, kept
    assert kept["seconds"] >= kept["build_s"] > 0, kept
    cold = _step("measure", tmp_path, tmp_path / "cold")
    assert cold["hit"] is False and cold["keys"], cold


def test_the_key_components_that_differ_are_named():
    from compile_cache_steps import differing_components, key_hashes

    first = [["Autograd graph cache hash details for key a:", "[x1] grad_enabled: False", "[y] gm: g"],
             ["FX graph cache hash details for key f:", "[z] only computed on a miss"]]
    second = [["Autograd graph cache hash details for key b:", "[x2] grad_enabled: True", "[y] gm: g"]]
    assert differing_components(first, second) == ["[x1] grad_enabled: False", "[x2] grad_enabled: True"]
    assert differing_components(first, first[:1]) == []
    assert key_hashes(first) == ["Autograd graph cache: a", "FX graph cache: f"]


def test_a_compile_ahead_reply_reads_back(tmp_path):
    path = tmp_path / "reply.json"
    path.write_text(WorkerReply(compiled_ahead=CompiledAhead(False, "TypeError: no", {"reference": 0.5})).to_json())
    reply = WorkerReply.read(path)
    assert reply is not None and reply.compiled_ahead == CompiledAhead(False, "TypeError: no", {"reference": 0.5})
    job = WorkerJob("src", "", tmp_path / "r.json", compile_ahead=True)
    (tmp_path / "job.json").write_text(job.to_json())
    assert WorkerJob.read(tmp_path / "job.json").compile_ahead is True


# -- the evaluator, with stand-in workers -----------------------------------------------------

def _standin(log: Path, ahead_s: float, keep: str = "") -> list[str]:
    """The stand-in worker, its compile-ahead jobs taking ``ahead_s`` and logged to ``log``; ``keep``:
    its $STANDIN_KEEP (1: the worker that built waits for the baseline job; die: it exits instead)."""
    return ["/usr/bin/env", f"STANDIN_AHEAD_S={ahead_s}", f"STANDIN_AHEAD_LOG={log}", f"STANDIN_KEEP={keep}",
            sys.executable, STANDIN]


def _evaluator(tmp_path: Path, log: Path, ahead_s: float = 0.0, uuid: str = "GPU-ahead-test", keep: str = "",
               **settings: Any) -> CudaEvaluator:
    values: dict[str, Any] = {"cache_dir": tmp_path / "cache", "run_timeout_s": 60, **settings}
    evaluator = CudaEvaluator(EvalSettings(**values), worker_command=_standin(log, ahead_s, keep),
                              devices=[DeviceInfo("stand-in", uuid, 0, cuda_version="13.0")], spares=0,
                              compiler=lambda code, cache, cancel: CompileOutcome(True, ""))
    evaluator._arch = "9.0"
    return evaluator


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _ended(results: Any) -> list[float]:
    return [r.ended_at for r in results]


def _started(results: Any) -> list[float]:
    return [r.ended_at - r.seconds for r in results]


def test_the_job_ahead_ends_before_the_baseline_job_starts_at_the_workers_priority(tmp_path):
    """Not niced: a worker that kept its build times the baseline in the same process, and a
    process cannot lower its niceness again."""
    log = tmp_path / "ahead.log"
    with _evaluator(tmp_path, log, ahead_s=1.0) as evaluator:
        verdicts = evaluator.evaluate(TASK, [code()])
        aheads, baselines = list(evaluator.last_ahead_results), list(evaluator.last_baseline_results)
    assert [v.stage for v in verdicts] == [Stage.TIMING]
    assert len(aheads) == 1 and aheads[0].compiled_ahead is not None and aheads[0].compiled_ahead.ok
    assert len(baselines) == 1 and _started(baselines)[0] >= _ended(aheads)[0]
    (entry,) = _log(log)
    assert entry["niceness"] == os.nice(0)
    assert entry["pid"] != baselines[0].pid  # this stand-in exits after its build: another worker measured


def test_a_worker_that_kept_its_build_measures_the_baseline_under_the_lease(tmp_path):
    """The worker that built torch.compile ahead stays and gets the task's baseline job, which
    waits for the GPU's lease as every job: held by this test, the build ends, the baseline waits."""
    log = tmp_path / "ahead.log"
    uuid = f"GPU-ahead-kept-{os.getpid()}"
    lease = GpuLease(uuid, "the test's GPU")
    assert lease.try_acquire()
    verdicts: list[Any] = []
    evaluator = _evaluator(tmp_path, log, uuid=uuid, keep="1")
    try:
        thread = threading.Thread(target=lambda: verdicts.extend(evaluator.evaluate(TASK, [code()])))
        thread.start()
        deadline = time.monotonic() + 120
        while not evaluator.last_ahead_results and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert evaluator.last_ahead_results and not evaluator.last_baseline_results  # the lease holds it back
        (entry,) = _log(log)
        assert _alive(entry["pid"])  # built, and waiting
    finally:
        lease.release()
    thread.join(120)
    evaluator.close()
    (baseline,) = evaluator.last_baseline_results
    assert baseline.baseline is not None and baseline.baseline.gpu_name == f"stand-in kept {entry['pid']}"
    assert [v.stage for v in verdicts] == [Stage.TIMING]


def test_a_kept_worker_lost_before_its_baseline_costs_only_the_head_start(tmp_path):
    log = tmp_path / "ahead.log"
    with _evaluator(tmp_path, log, ahead_s=0.2, keep="die") as evaluator:
        verdicts = evaluator.evaluate(TASK, [code()])
        (baseline,) = evaluator.last_baseline_results
    (entry,) = _log(log)
    assert baseline.baseline is not None and baseline.baseline.gpu_name == "stand-in"  # a fresh worker measured
    assert baseline.pid != entry["pid"] and [v.stage for v in verdicts] == [Stage.TIMING]


def test_a_lane_closed_with_a_kept_build_stops_its_worker(tmp_path):
    log = tmp_path / "ahead.log"
    lane = LocalLane(DeviceInfo("stand-in", "GPU-ahead-kept-close", 0), EvalSettings(sandbox="off"),
                     worker_command=_standin(log, 0.0, keep="1"), spares=0)
    job = WorkerJob(TASK.source, "", Path("unset"), EvalSettings(), compile_ahead=True)
    built = lane.compile_ahead(job)
    assert built is not None and built.compiled_ahead is not None and built.compiled_ahead.waits_for_baseline
    (entry,) = _log(log)
    assert _alive(entry["pid"])
    lane.close()
    deadline = time.monotonic() + 60
    while _alive(entry["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(entry["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def test_the_job_ahead_runs_while_another_process_holds_the_gpu(tmp_path):
    """Off the lease: it ends while the GPU is held elsewhere; the baseline job waits for the GPU."""
    log = tmp_path / "ahead.log"
    uuid = f"GPU-ahead-held-{os.getpid()}"
    lease = GpuLease(uuid, "the test's GPU")
    assert lease.try_acquire()
    verdicts: list[Any] = []
    try:
        evaluator = _evaluator(tmp_path, log, uuid=uuid)
        thread = threading.Thread(target=lambda: verdicts.extend(evaluator.evaluate(TASK, [code()])))
        thread.start()
        deadline = time.monotonic() + 120
        while not _log(log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_log(log)) == 1  # built while the lease was held by this test
        assert not evaluator.last_baseline_results and not verdicts
    finally:
        lease.release()
    thread.join(120)
    evaluator.close()
    assert [v.stage for v in verdicts] == [Stage.TIMING]
    assert len(evaluator.last_baseline_results) == 1


def test_one_job_ahead_per_task_and_none_once_its_baseline_is_stored(tmp_path):
    log = tmp_path / "ahead.log"
    with _evaluator(tmp_path, log) as evaluator:
        threads = [threading.Thread(target=evaluator.evaluate, args=(TASK, [code(str(i))])) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert len(_log(log)) == 1  # three batches of one task: one build ahead
    with _evaluator(tmp_path, log) as evaluator:  # a new process: the baseline is on disk now
        evaluator.evaluate(TASK, [code("again")])
        assert not evaluator.last_ahead_results and not evaluator.last_baseline_results
    assert len(_log(log)) == 1


def test_no_job_ahead_without_torch_compile(tmp_path):
    log = tmp_path / "ahead.log"
    with _evaluator(tmp_path, log, with_torch_compile=False) as evaluator:
        verdicts = evaluator.evaluate(TASK, [code()])
        assert not evaluator.last_ahead_results and len(evaluator.last_baseline_results) == 1
    assert [v.stage for v in verdicts] == [Stage.TIMING] and not _log(log)


class _RefusingLane(LocalLane):
    """A lane whose compile-ahead job cannot start (``raises``), or that has none (a remote lane)."""

    raises = True

    def compile_ahead(self, job: WorkerJob, *, cancel: Optional[threading.Event] = None,
                      timeout_s: Optional[float] = None) -> Any:
        if self.raises:
            raise OSError("no worker could start")
        return None


@pytest.mark.parametrize("raises", [True, False], ids=["fails", "cannot"])
def test_a_lane_without_a_job_ahead_still_measures_the_baseline(tmp_path, raises, capfd):
    log = tmp_path / "ahead.log"
    evaluator = _evaluator(tmp_path, log)
    settings = evaluator.settings
    lane = _RefusingLane(DeviceInfo("stand-in", "GPU-ahead-refused", 0), settings,
                         worker_command=_standin(log, 0.0), spares=0)
    lane.raises = raises
    evaluator._lanes = [lane]
    with evaluator:
        verdicts = evaluator.evaluate(TASK, [code()])
        assert len(evaluator.last_baseline_results) == 1 and not evaluator.last_ahead_results
    assert [v.stage for v in verdicts] == [Stage.TIMING] and not _log(log)
    said = capfd.readouterr().err
    assert ("was not built ahead (no worker could start)" in said) is raises


def test_a_lane_closed_while_its_job_ahead_runs_kills_it(tmp_path):
    log = tmp_path / "ahead.log"
    lane = LocalLane(DeviceInfo("stand-in", "GPU-ahead-close", 0), EvalSettings(sandbox="off"),
                     worker_command=_standin(log, 600.0), spares=0)
    job = WorkerJob(TASK.source, "", Path("unset"), EvalSettings(), compile_ahead=True)
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(lane.compile_ahead(job)))
    thread.start()
    deadline = time.monotonic() + 60
    while not lane._ahead_pools and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # its worker is past READY and building
    lane.close()
    thread.join(60)
    assert not thread.is_alive() and results and results[0].compiled_ahead is None  # killed, not built
    assert lane.compile_ahead(job) is None  # a closed lane starts none


@pytest.mark.parametrize(("delta", "served"), [
    ({"aot_hit": 1, "fx_hit": 1}, True), ({"fx_hit": 1}, True), ({"aot_hit": 1}, True),
    ({"aot_miss": 1, "fx_hit": 1}, True),  # Inductor's costly build came from its cache
    ({"aot_miss": 1, "fx_miss": 1}, False), ({"fx_miss": 1}, False), ({"aot_hit": 1, "fx_miss": 1}, False),
    ({"aot_miss": 1}, False), ({}, None),
])
def test_what_counts_as_served_from_the_caches(delta, served):
    from kevin_agent.evaluate.worker.baseline import _served_from_cache

    before = {"aot_hit": 3, "aot_miss": 2, "fx_hit": 5, "fx_miss": 7}
    after = {name: before[name] + delta.get(name, 0) for name in before}
    assert _served_from_cache(before, after) is served


def test_the_eval_bench_counts_the_jobs_ahead_and_the_baselines_they_served():
    """bench/eval_bench.py's figures on fixed numbers: jobs ahead built and not, their spans from
    the phase's start, and the baseline jobs that loaded torch.compile from the caches."""
    import importlib
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "bench"))
    eval_bench: Any = importlib.import_module("eval_bench")
    verdict = SimpleNamespace(message="the GPU worker exited with code 1")
    aheads = [SimpleNamespace(ended_at=106.0, seconds=4.0, compiled_ahead=CompiledAhead(True), verdict=verdict),
              SimpleNamespace(ended_at=105.0, seconds=2.0, compiled_ahead=CompiledAhead(False, "TypeError: x"),
                              verdict=verdict),
              SimpleNamespace(ended_at=109.0, seconds=3.0, compiled_ahead=None, verdict=verdict)]
    baselines = [SimpleNamespace(baseline=SimpleNamespace(compile_cache_hit=hit, built_ahead=ahead))
                 for hit, ahead in ((True, False), (False, False), (None, True))]
    baselines.append(SimpleNamespace(baseline=None))
    got = eval_bench.ahead_breakdown(aheads, baselines, started=100.0)
    assert (got["ahead_jobs"], got["ahead_built"], got["ahead_job_median_s"]) == (3, 1, 3.0)
    assert got["ahead_timeline"] == [[3.0, 5.0], [2.0, 6.0], [6.0, 9.0]]
    assert got["ahead_errors"] == ["TypeError: x", "the GPU worker exited with code 1"]
    assert (got["baseline_compiles_from_cache"], got["baseline_compiles"]) == (1, 3)
    assert got["baseline_compiles_built_ahead"] == 1


WATCH = """
import sys
from kevin_agent.evaluate.worker import main
print("first", sys.stdin.readline().strip(), flush=True)
lines = main._exit_with_parent()
print("next", lines.get(timeout=120), flush=True)
lines.get(timeout=120)  # never comes: end of file ends the process first
print("not reached", flush=True)
"""


def test_a_kept_worker_reads_its_next_job_and_exits_when_its_parent_goes():
    """The worker's watch on stdin: a line after the first job reaches the queue (the baseline job
    after a build ahead); end of file still ends the process at once (code 5, ORPHANED)."""
    proc = subprocess.Popen([sys.executable, "-c", WATCH], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("job-1.json\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "first job-1.json"
    proc.stdin.write("job-2.json\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "next job-2.json"
    proc.stdin.close()
    assert proc.wait(timeout=120) == 5
    assert proc.stdout.read() == ""


def test_the_worker_answers_a_job_with_its_reply_the_tasks_failure_or_nothing(tmp_path, capfd):
    """``main._answer``, which every job's reply goes through (the build ahead and the baseline job
    after it included): a reply is written with the job's token; a TaskProblem becomes the task's
    failure (its last line); any other exception writes nothing and exits INTERNAL (1)."""
    from kevin_agent.evaluate.protocol import WorkerExit
    from kevin_agent.evaluate.worker import main
    from kevin_agent.evaluate.worker.context import TaskProblem

    def job(name: str) -> WorkerJob:
        return WorkerJob("src", "", tmp_path / f"{name}.json", reply_token=f"token-{name}")

    assert main._answer(job("ok"), lambda: WorkerReply(compiled_ahead=CompiledAhead(True))) == WorkerExit.OK
    written = WorkerReply.read(tmp_path / "ok.json")
    assert written is not None and written.token == "token-ok" and written.compiled_ahead == CompiledAhead(True)

    def fails() -> WorkerReply:
        raise TaskProblem("Traceback ...\nNameError: name 'x' is not defined")

    assert main._answer(job("task"), fails) == WorkerExit.OK
    failed = WorkerReply.read(tmp_path / "task.json")
    assert failed is not None and failed.task_failure == "NameError: name 'x' is not defined"

    def bug() -> WorkerReply:
        raise KeyError("oops")

    assert main._answer(job("bug"), bug) == WorkerExit.INTERNAL == 1
    assert not (tmp_path / "bug.json").exists() and "KeyError: 'oops'" in capfd.readouterr().err
