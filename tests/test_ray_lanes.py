"""The evaluator on a Ray cluster, against a real local Ray cluster started here.

Real: Ray (a head started with ``ray start --head`` and node processes joining it, each in its own
session with its own build cache and name, like separate machines), placement (compile tasks on
whichever node has a free CPU, GPU actors on nodes declaring GPUs), the transport of build entries
as bytes between caches, the actor's ``LocalLane`` with its worker processes and GPU lease, node
death (SIGKILL to every process of a node), cancel, and `kevin optimize` as a real process.

Stood in: the GPU (nodes declare ``--num-gpus``; there is no CUDA device here, so the actors offer a
"stand-in" device and run ``tests/workers/ray_standin.py``, which speaks the real worker protocol)
and nvcc (``tests/ray_fixtures.py:fake_compile`` writes a real cache entry without compiling),
except in the ``nvcc`` test, which builds a real candidate through a Ray task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from loop_fixtures import TASK_FILE, with_verdicts, write_script
from ray_cluster import RAY_AUTH_MODE, ROOT, LocalCluster, pid_alive

from kevin_agent.data import Stage, Task
from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.evaluator import make_evaluator
from kevin_agent.evaluate.ray_worker import pack_entries, relocate_outcome, unpack_entries
from kevin_agent.evaluate.scheduling import LaneQueue

KERNELS = ROOT / "tests" / "fixtures" / "kernels"
GOOD = (KERNELS / "add_candidate.py").read_text()
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
STANDIN = [sys.executable, str(ROOT / "tests" / "workers" / "ray_standin.py")]
FAKE_COMPILE = "ray_fixtures:fake_compile"


def candidate(*markers: str) -> str:
    return GOOD.rstrip("\n") + "\n" + "".join(f"# {m}\n" for m in markers)


def fake_key(code: str) -> str:
    import hashlib

    return "fake" + hashlib.sha256(code.encode()).hexdigest()[:40]


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- without Ray, or without the setting ----------------------------------------------------------

def test_without_ray_the_setting_says_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(EnvironmentProblem) as caught:
        make_evaluator(None, EvalSettings(cluster="ray://head:10001"))
    assert str(caught.value) == "the cluster setting needs Ray: pip install 'kevin-agent[ray]'"


def test_nothing_imports_ray_without_the_setting(tmp_path):
    """Neither the evaluators, nor a whole replayed `kevin optimize`, nor a replay with the setting."""
    probe = (
        "import sys\n"
        "from kevin_agent.evaluate.api import EvalSettings\n"
        "from kevin_agent.evaluate.evaluator import make_evaluator\n"
        "import kevin_agent.cli, kevin_agent.runs.service\n"
        "make_evaluator(None, EvalSettings())\n"
        f"make_evaluator('replay:{tmp_path / 'r.json'}', EvalSettings(cluster='auto'))\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    (tmp_path / "r.json").write_text('{"by_marker": {}}')
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# -- build entries travel as bytes ---------------------------------------------------------------

def test_build_entries_travel_as_bytes_and_land_under_their_key(tmp_path):
    from ray_fixtures import fake_compile

    from kevin_agent.evaluate.build.cache import BuildCache

    source = BuildCache(tmp_path / "node")
    outcome = fake_compile(candidate("one"), source)
    key = outcome.results[0].key
    blob = pack_entries([source.root / "ext" / key])
    placed = unpack_entries(blob, tmp_path / "laptop")
    entry = tmp_path / "laptop" / "ext" / key
    assert placed == [entry]
    assert not (entry / "split" / "kernels.o").exists()  # objects stay where they were built
    raw = json.loads((entry / "result.json").read_text())
    assert raw["module_path"] == str(entry / "split" / f"kevin_{key[:16]}.so")  # paths moved with it
    assert Path(raw["module_path"]).read_text() == "built on ?\n"
    moved = relocate_outcome(outcome, tmp_path / "laptop")
    assert moved.results[0].log_path == str(entry / "build.log")
    (entry / "split" / f"kevin_{key[:16]}.so").write_text("kept\n")
    unpack_entries(blob, tmp_path / "laptop")  # an entry already there is kept
    assert (entry / "split" / f"kevin_{key[:16]}.so").read_text() == "kept\n"


def standin_node(tmp_path: Path, monkeypatch, compiler: str = FAKE_COMPILE):
    """A ``GpuNode`` as on a GPU node (its own cache), without Ray or a device; its jobs are
    captured instead of run. The node and the jobs its lane was handed."""
    from kevin_agent.data import Verdict
    from kevin_agent.evaluate import ray_worker
    from kevin_agent.evaluate.isolation import WorkerResult
    from kevin_agent.evaluate.lanes import DeviceInfo

    monkeypatch.setenv("KEVIN_BUILD_CACHE", str(tmp_path / "node-cache"))
    monkeypatch.setattr(ray_worker, "detect_device",
                        lambda fake_allowed: (DeviceInfo("stand-in", "standin-unit", 0, "node"), None))
    monkeypatch.setattr(ray_worker, "toolchain_fingerprint", lambda cache: None)
    node = ray_worker.GpuNode(EvalSettings(arch="9.0"), "9.0", worker_command=STANDIN, spares=0, compiler=compiler)
    handed = []

    def run(job, **_):
        handed.append(job)
        return WorkerResult(Verdict(Stage.TIMING, True, "ok"), 0, 0.0, 0, False)

    monkeypatch.setattr(node.lane.pool, "run", run)
    return node, handed


def test_a_gpu_node_lets_the_candidate_read_its_own_node_side_build_entries(tmp_path, monkeypatch):
    """The sandbox grants the job's ``build_entries`` only: they must be the node's, whether the
    entries travelled with the job or the node built the candidate itself."""
    from ray_fixtures import fake_compile

    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.protocol import WorkerJob

    code = candidate("entries")
    laptop = BuildCache(tmp_path / "laptop")
    key = fake_compile(code, laptop).results[0].key
    laptop_entry = laptop.root / "ext" / key
    job = WorkerJob(TASK.source, code, Path("unset"), EvalSettings(arch="9.0", cache_dir=laptop.root),
                    cache_dir=laptop.root, build_entries=(str(laptop_entry),))
    node, handed = standin_node(tmp_path, monkeypatch)
    try:
        node.run("travelled", job, pack_entries([laptop_entry]), 10.0, True)
        node.run("built-here", job, None, 10.0, True, build_here=True)
    finally:
        node.close()
    node_entry = str(tmp_path / "node-cache" / "ext" / key)
    for sent in handed:
        assert sent.cache_dir == tmp_path / "node-cache"
        assert sent.build_entries == (node_entry,)
        assert (Path(node_entry) / "result.json").is_file()


def test_a_cancel_that_reaches_the_node_before_its_job_still_cancels_it(tmp_path, monkeypatch):
    """A threaded actor may take ``cancel`` before ``run``: the job then starts cancelled."""
    from kevin_agent.evaluate.protocol import WorkerJob

    job = WorkerJob(TASK.source, candidate("early"), Path("unset"), EvalSettings(arch="9.0"))
    node, _ = standin_node(tmp_path, monkeypatch)
    seen = []

    def run(job, cancel=None, **_):
        from kevin_agent.data import Verdict
        from kevin_agent.evaluate.isolation import WorkerResult

        seen.append(cancel.is_set())
        return WorkerResult(Verdict(Stage.LOAD, False, "cancelled"), 0, 0.0, 0, False, cancelled=cancel.is_set())

    monkeypatch.setattr(node.lane.pool, "run", run)
    try:
        assert node.cancel("early-job") is False  # not known yet
        assert node.run("early-job", job, None, 10.0, True).cancelled
        assert node.run("other-job", job, None, 10.0, True).cancelled is False
    finally:
        node.close()
    assert seen == [True, False]


def unit_ray_evaluator(tmp_path: Path):
    """The Ray evaluator's own bookkeeping, without connecting to a cluster (its lanes are put
    straight into the pipeline it holds)."""
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.ray_lanes import RayEvaluator

    settings = EvalSettings(arch="9.0", cluster="ray://nowhere:10001", cache_dir=tmp_path / "cache")
    return RayEvaluator(settings, CudaEvaluator, worker_command=STANDIN, compile_function=FAKE_COMPILE)


def test_the_ray_evaluator_holds_a_pipeline_and_is_no_subclass_of_it(tmp_path):
    """Issue 20: composition over the pipeline's public methods, not a class made at run time."""
    from kevin_agent.evaluate import ray_lanes
    from kevin_agent.evaluate.evaluator import CudaEvaluator

    evaluator = unit_ray_evaluator(tmp_path)
    assert type(evaluator) is ray_lanes.RayEvaluator and not isinstance(evaluator, CudaEvaluator)
    assert type(evaluator.pipeline) is CudaEvaluator and evaluator.lanes == []


def queued_item(codes=("x",)):
    from kevin_agent.data import VerdictDetails
    from kevin_agent.evaluate.scheduling import Batch, GpuItem

    batch = Batch(TASK, list(codes), threading.Event(), None, None, None)
    return GpuItem(batch, 0, codes[0], VerdictDetails())


def scripted_lane(evaluator, comes_up: bool, device=None):
    """A ``RayLane`` without an actor: up now when it ``comes_up``, ``wait_up`` brings it up if so."""
    from kevin_agent.evaluate.ray_lanes import RayLane

    class ScriptedLane(RayLane):
        comes_up = False

        def wait_up(self, timeout_s: float) -> bool:
            self.up = self.comes_up
            return self.up

    lane = ScriptedLane(0, evaluator)
    lane.comes_up = lane.up = comes_up
    lane.device = device or lane.device
    return lane


def test_a_lane_that_comes_back_ends_the_all_gpus_lost_clock(tmp_path):
    """An outage that ended must not count towards the next one: a lane back up clears the clock."""
    evaluator = unit_ray_evaluator(tmp_path)
    lane = scripted_lane(evaluator, comes_up=True)
    lane.up = False  # its actor is being replaced
    evaluator.pipeline._lanes = [lane]
    lane_queue = LaneQueue()
    evaluator._all_down_since = time.monotonic() - 180  # an earlier outage, past the 120 s grace
    evaluator._bring_up(lane, lane_queue)
    assert evaluator._all_down_since is None
    item = queued_item()
    lane_queue.put(item)
    lane.up, lane.comes_up = False, False  # a new outage starts now
    evaluator._bring_up(lane, lane_queue)
    assert item.batch.error is None and not lane_queue.empty()


@pytest.mark.timeout(300)
def test_failing_the_queued_candidates_never_waits_on_an_empty_queue(tmp_path, monkeypatch):
    evaluator = unit_ray_evaluator(tmp_path)
    lane_queue = LaneQueue()
    # another lane's thread took the last item between a check and a take: never block
    monkeypatch.setattr(lane_queue, "empty", lambda: False)
    done = threading.Event()
    def fail_then_say() -> None:
        evaluator._fail_queued(lane_queue, EnvironmentProblem("gone"))
        done.set()

    threading.Thread(target=fail_then_say, daemon=True).start()
    assert done.wait(120), "_fail_queued blocked on an empty queue"  # it returns at once
    monkeypatch.undo()
    item = queued_item()
    lane_queue.put(item)
    evaluator._attempts[id(item)] = (1, 1)
    evaluator._fail_queued(lane_queue, EnvironmentProblem("gone"))
    assert str(item.batch.error) == "gone" and lane_queue.empty() and not evaluator._attempts


def test_a_candidate_ended_by_an_error_leaves_no_attempt_count(tmp_path, monkeypatch):
    evaluator = unit_ray_evaluator(tmp_path)
    item = queued_item()
    evaluator._attempts[id(item)] = (1, 1)  # lost once before

    def broken(lane, item):
        raise RuntimeError("the task fails")

    monkeypatch.setattr(evaluator.pipeline, "run_item", broken)
    with pytest.raises(RuntimeError):
        evaluator._run_or_retry(None, item, LaneQueue())
    assert evaluator._attempts == {}


def test_a_remote_compile_past_its_limit_is_a_compile_verdict_not_a_failed_run(tmp_path, monkeypatch):
    from kevin_agent.evaluate import ray_lanes
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.verdicts import build_details, compile_verdict

    class StuckRay:  # the task never finishes
        cancelled = []

        def wait(self, refs, timeout):
            time.sleep(0.01)
            return [], refs

        def cancel(self, ref, force=False):
            self.cancelled.append((ref, force))

    monkeypatch.setattr(ray_lanes, "COMPILE_MARGIN_S", 0.05)
    evaluator = unit_ray_evaluator(tmp_path)
    evaluator.settings = EvalSettings(arch="9.0", compile_timeout_s=0.0)
    stuck = StuckRay()
    outcome = evaluator.compiler._finish(stuck, "ref", BuildCache(tmp_path / "cache"), None)
    assert stuck.cancelled == [("ref", True)]
    assert not outcome.ok and outcome.results[0].timed_out
    verdict = compile_verdict(outcome, build_details(outcome))
    assert verdict.stage is Stage.COMPILE and not verdict.ok
    assert "did not finish within" in verdict.message and "timed out" in verdict.message


def test_baselines_are_measured_again_only_on_a_lane_that_is_up_with_the_same_gpu(tmp_path):
    from kevin_agent.errors import KevinError
    from kevin_agent.evaluate.lanes import DeviceInfo
    from kevin_agent.evaluate.ray_lanes import LaneLost

    evaluator = unit_ray_evaluator(tmp_path)
    pipeline = evaluator.pipeline
    down = scripted_lane(evaluator, False, DeviceInfo("NVIDIA H100", "gpu-down", 0, "a"))
    other = scripted_lane(evaluator, True, DeviceInfo("NVIDIA A100", "gpu-other", 0, "b"))
    pipeline._lanes = [down, other]
    pipeline._used[(TASK.source, "NVIDIA H100")] = (down, None, None)  # a stored baseline: always checked
    measured = []
    pipeline._measure = lambda lane, *_: measured.append(lane)
    assert evaluator.remeasure(TASK) == [] and measured == []  # no H100 up: skipped
    same = scripted_lane(evaluator, True, DeviceInfo("NVIDIA H100", "gpu-same", 1, "c"))
    pipeline._lanes.append(same)
    evaluator.remeasure(TASK)
    assert measured == [same]
    assert issubclass(LaneLost, KevinError)  # a lane lost while measuring is one line wherever it escapes


# -- a run spread over two GPU models: `kevin show` and `kevin report` group by GPU ----------------

def two_gpu_run(root: Path):
    """t0.* measured on an H100 (best 2.0x), t1.* on an A100 (best 3.0x): never compared."""
    from loop_fixtures import STORED_TASK, VERDICTS

    from kevin_agent.data import Candidate, Message, Verdict
    from kevin_agent.store import RunStore

    store = RunStore.for_path(root)
    store.create_run("run-gpus", STORED_TASK, {"trajectories": 2, "turns": 2})
    plan = {("t0.0", "NVIDIA H100"): "slow", ("t0.1", "NVIDIA H100"): "quick",
            ("t1.0", "NVIDIA A100"): "fastest", ("t1.1", "NVIDIA A100"): "wrong"}
    for (cid, gpu), marker in plan.items():
        trajectory, turn = int(cid[1]), int(cid[3])
        store.add_candidate("run-gpus", Candidate(trajectory, turn, id=cid, response="r", code="code"),
                            [Message("user", "p")], f"t{trajectory}.{turn - 1}" if turn else None)
        verdict = Verdict.from_dict(VERDICTS[marker])
        verdict.details.environment.gpu_name = gpu
        store.add_verdict("run-gpus", cid, verdict)
    return store.load_run("run-gpus")


def test_show_groups_a_run_by_gpu_model(tmp_path, capsys):
    import argparse

    from kevin_agent.commands import show_cmd

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    two_gpu_run(tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert show_cmd.run(argparse.Namespace(run_id="run-gpus", candidate=None, reasoning=False)) == 0
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "on NVIDIA H100" in out and "on NVIDIA A100" in out
    assert out.index("on NVIDIA H100") < out.index("Best on NVIDIA H100: t0.1, 2.00x vs eager.")
    assert "Best on NVIDIA A100: t1.0, 3.00x vs eager." in out


def test_report_plots_one_gpu_model_and_lists_the_best_per_model(tmp_path):
    from kevin_agent.report import render_html, report_data

    record = two_gpu_run(tmp_path)
    data = report_data(record)
    assert record.gpu_name in ("NVIDIA H100", "NVIDIA A100")
    main_best = 2.0 if record.gpu_name == "NVIDIA H100" else 3.0
    assert max(v for values in data.series.values() for v in values if v is not None) == main_best
    page = render_html(record, b"")
    assert 'id="by-gpu"' in page and "NVIDIA H100" in page and "NVIDIA A100" in page


# -- a real local cluster ---------------------------------------------------------------------------

ray = pytest.importorskip("ray")  # the tests above need no Ray


@pytest.fixture(scope="module")
def cluster():
    """A head (1 CPU, no GPU) and a second node declaring one GPU (1 CPU): two "machines"."""
    with pytest.MonkeyPatch.context() as patch, LocalCluster() as local:
        patch.setenv("RAY_AUTH_MODE", RAY_AUTH_MODE)  # the driver: see ray_cluster.RAY_AUTH_MODE
        local.start(num_cpus=1, num_gpus=0)
        local.add_node("gpu-a", num_cpus=1, num_gpus=1)
        try:
            yield local
        finally:
            ray.shutdown()


def ray_settings(cluster: LocalCluster, tmp_path: Path, **changes) -> EvalSettings:
    values: dict[str, Any] = dict(arch="9.0", cluster=cluster.address, cache_dir=tmp_path / "laptop-cache",
                                  run_timeout_s=60)
    values.update(changes)
    return EvalSettings(**values)


def open_ray(cluster: LocalCluster, tmp_path: Path, **changes):
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.ray_lanes import ray_evaluator

    evaluator = ray_evaluator(ray_settings(cluster, tmp_path, **changes), CudaEvaluator, worker_command=STANDIN,
                              compile_function=FAKE_COMPILE)
    evaluator.check_environment()
    return evaluator


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_compiles_spread_over_both_nodes_and_land_in_the_local_cache(cluster, tmp_path):
    cluster.clear_pids()
    codes = [candidate("fake-compile: barrier", f"spread {i}") for i in range(4)] + [candidate("fake-compile: error")]
    with open_ray(cluster, tmp_path, compile_only=True) as evaluator:
        assert evaluator.lanes == []  # compile-only: no GPU actor is asked for
        verdicts = evaluator.evaluate(TASK, codes)
        nodes = evaluator.compiler.nodes
    assert [v.stage for v in verdicts] == [Stage.COMPILE] * 5
    assert [v.ok for v in verdicts] == [True, True, True, True, False]
    assert "b_undeclared" in verdicts[4].message
    assert set(nodes) == {"head", "gpu-a"}  # two CPUs, one per node: both compiled
    for verdict in verdicts[:4]:
        log = Path(verdict.details.build.log_path)
        assert log.is_relative_to(tmp_path / "laptop-cache") and log.read_text().startswith("[1/1] fake build on")
    built_on = {p.read_text().strip() for p in (tmp_path / "laptop-cache" / "ext").glob("*/split/*.so")}
    assert built_on == {"built on head", "built on gpu-a"}


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_a_gpu_node_without_a_cuda_device_is_one_line_unless_a_stand_in_is_asked_for(cluster, tmp_path):
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.ray_lanes import ray_evaluator

    evaluator = ray_evaluator(ray_settings(cluster, tmp_path), CudaEvaluator)  # the real worker
    with pytest.raises(EnvironmentProblem) as caught:
        evaluator.check_environment()
    evaluator.close()
    assert str(caught.value) == "Ray node gpu-a declares a GPU but no CUDA device is visible there"


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_gpu_stages_run_on_the_gpu_node_in_its_own_worker_processes(cluster, tmp_path):
    codes = [candidate("standin: normal", "a"), candidate("standin: crash"), candidate("standin: normal", "b")]
    with open_ray(cluster, tmp_path) as evaluator:
        assert evaluator.gpu_name == "stand-in" and [lane.name for lane in evaluator.lanes] == ["ray:gpu-a/cuda:0"]
        verdicts = evaluator.evaluate(TASK, codes)
    normal, crash, other = verdicts
    assert crash.stage is Stage.LOAD and "SIGSEGV" in crash.message
    for code, verdict in ((codes[0], normal), (codes[2], other)):
        assert verdict.stage is Stage.TIMING and verdict.ok
        where = verdict.details.environment
        assert where.lane == "ray:gpu-a/cuda:0" and where.gpu_name == "stand-in"
        assert verdict.details.environment.gpu_uuid.startswith("standin-")
        seen = json.loads(verdict.message)  # the stand-in says where it ran and what its cache held
        assert seen["node"] == "gpu-a" and seen["cache_dir"] == str(cluster.root / "cache-gpu-a")
        assert seen["cuda_visible_devices"] == "0"  # pinned to the GPU Ray gave the actor, like locally
        assert seen["arch"] == "9.0"
        key = fake_key(code)
        assert key in seen["entries"]  # its build travelled to the GPU node's own cache
        assert (tmp_path / "laptop-cache" / "ext" / key / "result.json").is_file()  # and to ours
    assert json.loads(normal.message)["pid"] != json.loads(other.message)["pid"]  # a fresh process each


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_a_node_killed_mid_run_loses_no_candidate_and_nothing_hangs(cluster, tmp_path):
    """A second GPU node joins; while it runs a candidate it is killed (every process of it).
    The job is retried on the surviving node and every candidate gets its verdict."""
    cluster.clear_pids()
    doomed = cluster.add_node("gpu-b", num_cpus=0, num_gpus=1)
    try:
        codes = [candidate("standin: sleep 3", f"k{i}") for i in range(4)]
        with open_ray(cluster, tmp_path) as evaluator:
            wait_for(lambda: all(lane.up or lane.wait_up(1.0) for lane in evaluator.lanes), 600,
                     "the new node's GPU actor to start")  # a slow machine starts it later
            assert sorted(lane.name for lane in evaluator.lanes) == ["ray:gpu-a/cuda:0", "ray:gpu-b/cuda:0"]
            result: dict = {}
            runner = threading.Thread(target=lambda: result.update(v=evaluator.evaluate(TASK, codes)))
            started = time.monotonic()
            runner.start()
            wait_for(lambda: cluster.running_standins("gpu-b"), 600, "a candidate running on gpu-b")
            cluster.kill(doomed)
            runner.join(600)  # a guard: the lost job is retried within seconds
            elapsed = time.monotonic() - started
            assert not runner.is_alive(), "the run hung after the node died"
            lanes = [v.details.environment.lane for v in result["v"]]
            lost = [lane for lane in evaluator.lanes if lane.lost_count]
        assert [v.stage for v in result["v"]] == [Stage.TIMING] * 4 and all(v.ok for v in result["v"])
        assert lanes.count("ray:gpu-a/cuda:0") == 4  # including the one gpu-b was running
        assert len(lost) == 1 and elapsed < 600
    finally:
        cluster.kill(doomed)


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_a_candidate_that_kills_its_ray_worker_gets_a_verdict_and_the_lane_comes_back(cluster, tmp_path):
    """The killed actor is replaced on the same GPU; the job is retried, and a candidate that keeps
    killing its node's actor ends as a crash verdict instead of looping."""
    codes = [candidate("standin: killactor"), candidate("standin: normal", "survivor")]
    with open_ray(cluster, tmp_path) as evaluator:
        started = time.monotonic()
        killer, survivor = evaluator.evaluate(TASK, codes)
        elapsed = time.monotonic() - started
        lane = evaluator.lanes[0]
        after = evaluator.evaluate(TASK, [candidate("standin: normal", "after the kills")])
    assert killer.stage is Stage.LOAD and not killer.ok and "was lost" in killer.message
    assert survivor.ok and after[0].ok and after[0].details.environment.lane == "ray:gpu-a/cuda:0"
    assert lane.lost_count >= 2 and elapsed < 600  # no hang (it takes ~100 s on a busy 2-core machine)


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_cancel_kills_the_remote_worker_and_the_remote_compile(cluster, tmp_path):
    """Only the cancel can end them within the test's waits: the hung worker's run limit (its
    reference takes 1 s: over 1600 s) and the build (1200 s) both outlast them."""
    slow_task = Task(source=TASK.source + "\n# standin-baseline-ms: 1000\n", class_name="Model")
    codes = [candidate("standin: hang"), candidate("fake-compile: child 1200", "standin: normal")]
    cancel = threading.Event()
    cluster.clear_pids()
    with open_ray(cluster, tmp_path, run_timeout_s=3600) as evaluator:
        runner = threading.Thread(target=lambda: evaluator.evaluate(slow_task, codes, cancel=cancel))
        runner.start()
        wait_for(lambda: cluster.running_standins("gpu-a") and cluster.pids("compile-"), 300,
                 "a remote worker and a compile")
        (worker_pid,), [(_, build_pid)] = cluster.running_standins("gpu-a"), cluster.pids("compile-")
        assert pid_alive(worker_pid) and pid_alive(build_pid)
        cancel.set()
        runner.join(300)  # guards: a cancel is noticed in well under a second, the kills in seconds
        assert not runner.is_alive()
        wait_for(lambda: not pid_alive(worker_pid), 300, "the remote worker to be killed")
        wait_for(lambda: not pid_alive(build_pid), 300, "the remote build to be killed")
        killed = fake_key(codes[1])  # its failed build (killed) did not stay in either node's cache
        wait_for(lambda: not any((cluster.root / f"cache-{n}" / "ext" / killed).exists() for n in ("head", "gpu-a")),
                 300, "the killed build's entry to be dropped")
        # the lane is still good for the next batch
        again = evaluator.evaluate(TASK, [candidate("standin: normal", "after cancel")])
    assert again[0].stage is Stage.TIMING and again[0].ok


@pytest.mark.timeout(900)  # a guard: a Ray test takes 5-100 s on a busy 2-core machine
def test_kevin_optimize_on_the_cluster_stores_every_verdict(cluster, tmp_path):
    """`kevin optimize --cluster ray://...` as a real process (scripted model): compiles on both
    nodes, GPU stages on the GPU node, every verdict in the run store, `kevin show` reads it."""
    import shutil

    from kevin_agent.store import RunStore

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copy(TASK_FILE, repo / "add.py")
    plan = {(t, n): f"ray{t}{n}" for t in range(2) for n in range(2)}
    script = json.loads(write_script(tmp_path / "script.json", plan).read_text())
    for response in script["responses"]:  # a compile waits for one on the other node: both nodes get one
        response["text"] = response["text"].replace("# kevin-test:", "# fake-compile: barrier\n# kevin-test:")
    (tmp_path / "script.json").write_text(json.dumps(script))
    cluster.clear_pids()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_", "RAY_"))}
    env.update(RAY_AUTH_MODE=RAY_AUTH_MODE, KEVIN_RAY_WORKER_COMMAND=" ".join(STANDIN), KEVIN_RAY_COMPILER=FAKE_COMPILE,
               KEVIN_BUILD_CACHE=str(tmp_path / "laptop-cache"), TORCH_CUDA_ARCH_LIST="9.0")
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "optimize", "add.py::Model", "--backend", "scripted",
                           "--script", str(tmp_path / "script.json"), "-m", "2", "-n", "2", "--json",
                           "--cluster", cluster.address], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    record = RunStore.for_path(repo).load_run("latest")
    verdicts = [v for _, v in with_verdicts(record.candidates)]
    assert len(verdicts) == 4 and all(v is not None for v in verdicts)
    assert all(v.stage is Stage.TIMING and v.ok for v in verdicts)
    assert {v.details.environment.lane for v in verdicts} == {"ray:gpu-a/cuda:0"}
    assert {v.details.environment.gpu_name for v in verdicts} == {"stand-in"}
    built_on = {p.read_text().strip() for p in (tmp_path / "laptop-cache" / "ext").glob("*/split/*.so")}
    assert built_on == {"built on head", "built on gpu-a"}
    show = subprocess.run([sys.executable, "-m", "kevin_agent", "show", "latest"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and "t1.1" in show.stdout


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a cold precompiled header on a busy 2-core machine
def test_a_real_compile_as_a_ray_task_lands_usable_in_another_cache(cluster, tmp_path):
    """The compile task with the real compiler (nvcc through the split build) on a cluster node,
    into the shared test build cache (its precompiled header is reused, like the other nvcc
    tests); the entry, unpacked into a fresh cache elsewhere, is a hit there under the same key."""
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.specs import extract_specs
    from kevin_agent.evaluate.ray_worker import compile_on_node
    code = GOOD.replace("out[idx] = a[idx] + b[idx];", "out[idx] = a[idx] + b[idx];  // built by a Ray task")
    from kevin_agent.evaluate.ray_lanes import connect

    shared = Path(os.environ.get("KEVIN_TEST_BUILD_CACHE") or Path("/tmp") / "kevin-test-build-cache")
    connect(cluster.address)
    task = ray.remote(compile_on_node).options(num_cpus=1)
    reply = ray.get(task.remote(code, "9.0", 900.0, 2, None, str(shared)), timeout=1700)
    outcome = reply["outcome"]
    assert outcome.ok, outcome.message
    assert reply["node"] in ("head", "gpu-a") and reply["fingerprint"]
    laptop = BuildCache(tmp_path / "laptop", arch="9.0")
    unpack_entries(reply["blob"], laptop.root)
    moved = relocate_outcome(outcome, laptop.root)
    assert moved.results[0].module_path and Path(moved.results[0].module_path).is_file()
    specs, _ = extract_specs(code)
    again = laptop.build(specs[0])  # same toolchain here: the unpacked entry is found, not rebuilt
    assert again.ok and again.cache_hit and again.key == outcome.results[0].key
