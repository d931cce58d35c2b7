"""The evaluator on a Ray cluster: compiles as Ray tasks, GPU stages on the cluster's GPUs.

``ray_evaluator(settings, CudaEvaluator)`` (``settings.cluster``: "auto" or "ray://HEAD:10001")
returns a ``RayEvaluator``, which holds a ``CudaEvaluator`` pipeline (static checks here, parallel
compiles, one queue feeding every lane, baselines once per GPU model) and hands it the cluster's
parts, using only the pipeline's public methods:
  - compiles sent to the cluster (``RemoteCompiler``): a Ray task (1 CPU, any node) builds the
    candidate into that node's own build cache and sends the entries back as bytes, unpacked into
    the local cache under the same key;
  - one ``RayLane`` per GPU of the cluster: a Ray actor (``num_gpus=1``) wrapping a ``LocalLane``
    on its node (``ray_worker.GpuNode``), so every candidate runs in the same fresh, killable,
    scrubbed worker process under the node's GPU lease as on a local GPU. The build entries a job
    needs travel with it (or, when that node's toolchain differs, the node builds the candidate);
  - the environment check (connect, the lanes, the architecture) and each lane's thread.

Failures never hang a run: a lost node or killed actor turns the job into a retry on another lane
(``MAX_ATTEMPTS``), then into a verdict; every wait has a limit; cancel cancels the compile tasks
and kills the remote worker. The kevin_agent package travels to the cluster with the connection
(Ray ``py_modules``), so nodes run this very code. Only this module imports Ray (and, on the
nodes, ``ray_worker`` asks Ray for its node id).

Test seams (read only here): ``$KEVIN_RAY_WORKER_COMMAND`` replaces the GPU worker on the nodes
(a stand-in speaking the worker protocol) and ``$KEVIN_RAY_COMPILER`` ("module:function") replaces
the compile of one candidate on the nodes.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, Protocol

from kevin_agent import feedback
from kevin_agent.data import Stage, Task, Verdict, VerdictDetails
from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate import ray_worker
from kevin_agent.evaluate.api import EvalSettings, Evaluator, QueueCallback, VerdictCallback, WaitCallback
from kevin_agent.evaluate.build.cache import BuildCache, BuildResult
from kevin_agent.evaluate.build.compile import CompileOutcome
from kevin_agent.evaluate.isolation import WorkerResult
from kevin_agent.evaluate.lanes import DeviceInfo, GpuLane
from kevin_agent.evaluate.processes import crash_verdict
from kevin_agent.evaluate.protocol import WorkerJob
from kevin_agent.evaluate.scheduling import GpuItem, LaneQueue, Target

WORKER_COMMAND_ENV = "KEVIN_RAY_WORKER_COMMAND"  # test seam: the GPU worker command on the nodes
COMPILER_ENV = "KEVIN_RAY_COMPILER"  # test seam: "module:function" compiling one candidate on a node
MAX_ATTEMPTS = 2  # a candidate whose node is lost this often gets a verdict (it may be the cause)
MAX_BOUNCES = 4  # requeues of one candidate for any reason (lanes found dead before taking the job)
ACK_GRACE_S = 5.0  # a lane lost this long after taking a job counts against the candidate
CLOSE_GRACE_S = 5.0  # a closing actor's time to kill its workers and remove their scratch folders
MAX_PARALLEL_COMPILES = 64
CONNECT_ATTEMPTS = 3
POLL_S = 0.2  # ray.wait slices: results return at once, cancel is seen within this
PROGRESS_EVERY_S = 1.0  # ask a GPU node how its job goes (lease wait messages, liveness)
PROGRESS_TIMEOUT_S = 60.0  # a node that does not answer this long is lost
RUN_MARGIN_S = 60.0  # past the run limit a node's own kill should have ended the job
CANCEL_GRACE_S = 10.0  # after a cancel, how long the node may take to kill its worker
LANE_START_TIMEOUT_S = 180.0  # actors placed, devices probed
LANE_START_QUORUM_S = 20.0  # once one lane is up, how long to wait for the others before starting
NO_GPU_GRACE_S = 120.0  # every lane lost this long: queued candidates fail the batch
COMPILE_MARGIN_S = 300.0  # beyond the compile limit: finding load_inline arguments, a busy queue
NINJA_JOBS_PER_BUILD = 2  # as locally: a build's two compile steps (kernels, wrapper) overlap
CANCELLED_COMPILE = "The evaluation was cancelled before this answer was compiled."


def import_ray() -> Any:
    """Ray, or the one line that says how to get it."""
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem("the cluster setting needs Ray: pip install 'kevin-agent[ray]'") from None
    return ray


class LaneLost(EnvironmentProblem):
    """A remote lane lost its GPU node or actor mid-job; the job did not finish (run it elsewhere).
    ``counted``: the node had the job (it said so, or a while passed), so the candidate may be why.
    An EnvironmentProblem, so one that escapes (a baseline measured again at the end) is one line."""

    counted = True


def ray_evaluator(settings: EvalSettings, pipeline: Callable[..., Pipeline], *,
                  worker_command: Optional[Sequence[str]] = None, compile_function: Optional[str] = None,
                  spares: int = 1) -> RayEvaluator:
    """The evaluator for ``settings.cluster``: a ``RayEvaluator`` over a ``pipeline`` it makes
    (``CudaEvaluator``, handed in by ``make_evaluator`` so this module never imports it back).
    EnvironmentProblem (one line) without Ray. ``worker_command`` and ``compile_function``
    ("module:function") are the test seams."""
    import_ray()
    command = worker_command or shlex.split(os.environ.get(WORKER_COMMAND_ENV, "")) or None
    return RayEvaluator(settings, pipeline, worker_command=command, spares=spares,
                        compile_function=compile_function or os.environ.get(COMPILER_ENV) or None)


# -- the connection ------------------------------------------------------------------------------

_connection_lock = threading.Lock()
_connected_to: Optional[str] = None


def connect(address: str) -> dict[str, float]:
    """Join the cluster at ``address`` once per process (shipping this kevin_agent to its nodes);
    the cluster's total resources."""
    global _connected_to
    ray = import_ray()
    with _connection_lock:
        if ray.is_initialized() and _connected_to not in (None, address):
            ray.shutdown()
        if not ray.is_initialized():
            _init(ray, address)
            _connected_to = address
        return dict(ray.cluster_resources())


def _init(ray: Any, address: str) -> None:
    """``ray.init``, tried ``CONNECT_ATTEMPTS`` times (a busy head may fail to start our session)."""
    package = str(Path(ray_worker.__file__).resolve().parents[1])
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            ray.init(address=address, runtime_env={"py_modules": [package]}, logging_level=logging.ERROR,
                     log_to_driver=False, namespace="kevin-agent")
            return
        except Exception as err:  # ConnectionError, RuntimeError, version mismatch...
            if ray.is_initialized():
                ray.shutdown()
            if attempt == CONNECT_ATTEMPTS:
                raise EnvironmentProblem(f"cannot connect to the Ray cluster at {address}: "
                                         f"{_first_line(err)}") from None
            time.sleep(2.0 * attempt)


def _cause(err: BaseException) -> BaseException:
    """The exception our code raised on a node (RayTaskError wraps it)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


# -- compiles ------------------------------------------------------------------------------------

class RemoteCompiler:
    """Compiles one candidate as a Ray task; its entries land in the local cache under their keys."""

    def __init__(self, evaluator: RayEvaluator, reference: Optional[str]) -> None:
        self.evaluator = evaluator
        self.reference = reference
        self.fingerprints: dict[str, Optional[str]] = {}  # cache key -> toolchain it was built with
        self.nodes: collections.Counter[str] = collections.Counter()  # where compiles ran
        self._task: Any = None
        self._running: set[Any] = set()
        self._lock = threading.Lock()

    def __call__(self, code: str, cache: BuildCache, cancel: Optional[threading.Event] = None) -> CompileOutcome:
        ray = import_ray()
        settings = self.evaluator.settings
        ref = self._remote().remote(code, self.evaluator.arch, settings.compile_timeout_s, NINJA_JOBS_PER_BUILD,
                                    self.reference)
        with self._lock:
            self._running.add(ref)
        try:
            return self._finish(ray, ref, cache, cancel)
        finally:
            with self._lock:
                self._running.discard(ref)

    def _finish(self, ray: Any, ref: Any, cache: BuildCache, cancel: Optional[threading.Event]) -> CompileOutcome:
        limit_s = self.evaluator.settings.compile_timeout_s + COMPILE_MARGIN_S
        started = time.monotonic()
        while not ray.wait([ref], timeout=POLL_S)[0]:
            if cancel is not None and cancel.is_set():
                ray.cancel(ref)  # KeyboardInterrupt there: it kills its builds
                return CompileOutcome(False, CANCELLED_COMPILE)
            if time.monotonic() - started > limit_s:
                ray.cancel(ref, force=True)
                return timed_out_compile(limit_s, time.monotonic() - started)
        try:
            reply = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return CompileOutcome(False, CANCELLED_COMPILE)
        except ray.exceptions.RayTaskError as err:
            raise _cause(err) from None
        except ray.exceptions.RayError as err:  # Ray's own retries on other nodes ran out
            raise EnvironmentProblem(f"the Ray cluster lost a compile: {_first_line(err)}") from None
        ray_worker.unpack_entries(reply["blob"], cache.root)
        outcome = ray_worker.relocate_outcome(reply["outcome"], cache.root)
        for result in outcome.results:
            if result.key:
                self.fingerprints[result.key] = reply["fingerprint"]
        self.nodes[reply["node"]] += 1
        return outcome

    def cancel_all(self) -> None:
        """Cancel every compile still running on the cluster (the evaluator closes)."""
        with self._lock:
            running, self._running = list(self._running), set()
        if running:
            ray = import_ray()
            for ref in running:
                try:
                    ray.cancel(ref)
                except Exception:  # finished meanwhile, or the connection is gone
                    pass

    def _remote(self) -> Any:
        if self._task is None:
            ray = import_ray()
            self._task = ray.remote(ray_worker.compile_on_node).options(num_cpus=1, max_retries=2)
        return self._task


def timed_out_compile(limit_s: float, seconds: float) -> CompileOutcome:
    """The outcome of a compile the cluster did not finish within ``limit_s`` (stopped): a COMPILE
    verdict for that candidate, as a local build's timeout gives; the run goes on."""
    errors = f"error: the build did not finish within {limit_s:.0f} s on the Ray cluster and was stopped (timed out)"
    result = BuildResult(False, seconds, False, None, errors, "", None, timed_out=True)
    return CompileOutcome(False, feedback.compile_error(errors), [result])


# -- GPU lanes -----------------------------------------------------------------------------------

class RayLane(GpuLane):
    """One GPU of the cluster: a ``GpuNode`` actor; replaced (wherever Ray finds a GPU) when lost."""

    def __init__(self, number: int, evaluator: RayEvaluator) -> None:
        self.number = number
        self.evaluator = evaluator
        self.device = DeviceInfo("unknown", f"ray-lane-{number}", number)
        self.info: dict[str, Any] = {}
        self.actor: Any = None
        self.up = False
        self.closed = False  # no actor is asked for after close (a pending one would take a GPU later)
        self.lost_count = 0
        self._ready: Any = None

    @property
    def name(self) -> str:
        return f"ray:{self.device.host or '?'}/cuda:{self.device.index}"

    def start(self) -> None:
        """Ask Ray for an actor on a free GPU (returns at once; ``wait_up`` sees it placed)."""
        if self.actor is None and not self.closed:
            ev = self.evaluator
            self.actor = ev.gpu_node_class().remote(ev.settings, ev.arch or "", worker_command=ev.worker_command,
                                                    spares=ev.spares, compiler=ev.compile_function)
            self._ready = self.actor.describe.remote()

    def wait_up(self, timeout_s: float) -> bool:
        """True once the actor is placed and knows its device; False while pending or when it failed."""
        ray = import_ray()
        self.start()
        ready = self._ready
        if ready is None:  # closed
            return False
        if not ray.wait([ready], timeout=timeout_s)[0]:
            return False
        try:
            self.info = ray.get(ready)
        except ray.exceptions.RayTaskError as err:  # the node cannot serve (no device...): say why
            self.drop()
            raise _cause(err) from None
        except ray.exceptions.RayError as err:
            self.drop()
            if "creation task" in str(err):  # the actor cannot even start there (no torch, a bad image...)
                last = [line for line in str(err).strip().splitlines() if line.strip()][-1].strip()
                raise EnvironmentProblem(f"a GPU actor could not start on the Ray cluster: {last[:300]}") from None
            return False
        self.device = DeviceInfo(**self.info["device"])
        self.up = True
        return True

    def warm(self) -> None:
        actor = self.actor
        if actor is not None:
            actor.warm.remote()

    def run(self, job: WorkerJob, *, build_entries: Sequence[Path] = (),
            cancel: Optional[threading.Event] = None, timeout_s: Optional[float] = None,
            on_wait: Optional[WaitCallback] = None, last: bool = False) -> WorkerResult:
        ray = import_ray()
        actor = self.actor
        if not self.up or actor is None:
            raise LaneLost(f"{self.name} is not up")
        blob, build_here = self._shipment(build_entries)
        job_id, submitted = uuid.uuid4().hex, time.monotonic()
        ref = actor.run.remote(job_id, job, blob, timeout_s, last, build_here)
        watch = _Watch(self, actor, job_id, on_wait, timeout_s or self.evaluator.settings.run_timeout_s)
        try:
            while not ray.wait([ref], timeout=POLL_S)[0]:
                if cancel is not None and cancel.is_set():
                    return self._cancel(actor, job_id, ref)
                watch.check()
            return self._collect(ref)
        except LaneLost as lost:
            lost.counted = watch.acknowledged or time.monotonic() - submitted > ACK_GRACE_S
            raise

    def _shipment(self, entries: Sequence[Path]) -> tuple[Optional[bytes], bool]:
        """The packed entries, or (None, True): this node's toolchain keys builds differently."""
        if not entries:
            return None, False
        mine = self.info.get("fingerprint")
        theirs = {self.evaluator.compiler.fingerprints.get(Path(e).name) for e in entries}
        if mine is not None and theirs - {mine, None}:
            return None, True
        return ray_worker.pack_entries(entries), False

    def _collect(self, ref: Any) -> WorkerResult:
        ray = import_ray()
        try:
            result: WorkerResult = ray.get(ref)
        except ray.exceptions.RayTaskError as err:
            raise _cause(err) from None
        except ray.exceptions.RayError as err:
            raise self.lose(_first_line(err)) from None
        where = result.verdict.details.environment
        where.lane = self.name
        where.gpu_uuid = where.gpu_uuid or self.device.uuid
        where.gpu_name = where.gpu_name or self.device.name
        return result

    def _cancel(self, actor: Any, job_id: str, ref: Any) -> WorkerResult:
        """Kill the remote worker (the node's pool kills its process group); a node that does not
        answer in time loses its actor."""
        ray = import_ray()
        actor.cancel.remote(job_id)
        if ray.wait([ref], timeout=CANCEL_GRACE_S)[0]:
            try:
                result = ray.get(ref)
                if result.cancelled:
                    return result
            except ray.exceptions.RayError:
                pass
        else:
            self.lose("it did not stop its worker after a cancel")
        verdict = Verdict(Stage.LOAD, False, "The evaluation was cancelled before this answer was run.",
                          VerdictDetails(error="cancelled"))
        return WorkerResult(verdict, 0, 0.0, None, True, cancelled=True)

    def lose(self, why: str) -> LaneLost:
        """Give up this lane's actor (killed, so its GPU is free again); the error to raise."""
        lost = LaneLost(f"{self.name} was lost: {why}")
        self.lost_count += 1
        self.drop()
        return lost

    def drop(self) -> None:
        actor, self.actor, self._ready, self.up = self.actor, None, None, False
        if actor is not None:
            try:
                import_ray().kill(actor, no_restart=True)
            except Exception:  # already gone, or the connection with it
                pass

    def close(self) -> None:
        """Let the actor kill its workers and remove their folders, then end it."""
        self.closed = True
        if self.actor is not None:
            try:
                import_ray().get(self.actor.close.remote(), timeout=CLOSE_GRACE_S)
            except Exception:  # gone already, or not answering: killed below all the same
                pass
        self.drop()


class _Watch:
    """While a job runs: forward the node's lease-wait messages, and lose the lane when the node
    stops answering or the job outlives its limit."""

    def __init__(self, lane: RayLane, actor: Any, job_id: str, on_wait: Optional[WaitCallback],
                 limit_s: float) -> None:
        self.lane, self.actor, self.job_id, self.on_wait, self.limit_s = lane, actor, job_id, on_wait, limit_s
        self.ref: Any = None
        self.sent = self.next_at = time.monotonic()
        self.told: Optional[str] = None
        self.acknowledged = False  # the node said it has the job

    def check(self) -> None:
        ray = import_ray()
        now = time.monotonic()
        if self.ref is None:
            if now >= self.next_at:
                self.ref, self.sent = self.actor.progress.remote(self.job_id), now
            return
        if not ray.wait([self.ref], timeout=0)[0]:
            if now - self.sent > PROGRESS_TIMEOUT_S:
                raise self.lane.lose(f"its node did not answer for {PROGRESS_TIMEOUT_S:.0f} s")
            return
        try:
            progress = ray.get(self.ref)
        except ray.exceptions.RayError as err:
            raise self.lane.lose(_first_line(err)) from None
        self.ref, self.next_at = None, now + PROGRESS_EVERY_S
        self.acknowledged = self.acknowledged or bool(progress.get("known"))
        waiting = progress.get("waiting")
        if waiting and waiting != self.told and self.on_wait is not None:
            self.on_wait(f"{waiting} (on {self.lane.device.host})")
        self.told = waiting or self.told
        running = progress.get("running_s")
        if running is not None and running > self.limit_s + RUN_MARGIN_S:
            raise self.lane.lose(f"its job ran {running:.0f} s, past its {self.limit_s:.0f} s limit")


# -- the evaluator -------------------------------------------------------------------------------

class Pipeline(Protocol):
    """What a ``RayEvaluator`` uses of the pipeline it holds (``CudaEvaluator``): public methods only."""

    gpu_name: Optional[str]

    @property
    def lanes(self) -> list[GpuLane]: ...

    def check_environment(self) -> None: ...

    def evaluate(self, task: Task, codes: Sequence[str], *, on_verdict: Optional[VerdictCallback] = None,
                 on_queue: Optional[QueueCallback] = None, cancel: Optional[threading.Event] = None,
                 on_wait: Optional[WaitCallback] = None) -> list[Verdict]: ...

    def serve(self, lane: GpuLane, lane_queue: LaneQueue) -> None: ...

    def run_item(self, lane: GpuLane, item: GpuItem) -> None: ...

    def remeasure(self, task: Task) -> list[Any]: ...

    def close(self) -> None: ...


class RayEvaluator(Evaluator):
    """The evaluator on the Ray cluster at ``settings.cluster``: it holds the local pipeline
    (``pipeline``, made by the class handed in) and gives it the cluster's parts: the environment
    check (connect, lanes, arch), the compile (``RemoteCompiler``: a cancel reaches the cluster),
    the lanes (``RayLane``s) and a lane's thread (a lost lane's job runs again elsewhere)."""

    def __init__(self, settings: EvalSettings, pipeline: Callable[..., Pipeline], *,
                 worker_command: Optional[Sequence[str]] = None, compile_function: Optional[str] = None,
                 spares: int = 1) -> None:
        self.settings = settings
        self.worker_command = worker_command
        self.compile_function = compile_function
        self.spares = spares
        self.address = settings.cluster or "auto"
        self.resources: dict[str, float] = {}
        self.compiler = RemoteCompiler(self, compile_function)
        self._arch: Optional[str] = None
        self._actor_class: Any = None
        self._attempts: dict[int, tuple[int, int]] = {}  # id(item) -> (losses counted, requeues)
        self._down_lock = threading.Lock()
        self._all_down_since: Optional[float] = None
        self.pipeline = pipeline(settings, worker_command=worker_command, spares=spares, compiler=self.compiler,
                                 environment=self._target, open_lanes=self._open_lanes, serve=self._serve)

    @property
    def arch(self) -> Optional[str]:
        return self._arch

    @property
    def gpu_name(self) -> Optional[str]:  # the pipeline's, read through
        return self.pipeline.gpu_name

    @gpu_name.setter
    def gpu_name(self, name: Optional[str]) -> None:
        self.pipeline.gpu_name = name

    @property
    def lanes(self) -> list[GpuLane]:
        return self.pipeline.lanes

    def gpu_node_class(self) -> Any:
        if self._actor_class is None:
            ray = import_ray()
            self._actor_class = ray.remote(ray_worker.GpuNode).options(
                num_gpus=1, num_cpus=0, max_concurrency=4, max_restarts=0, max_task_retries=0)
        return self._actor_class

    # -- what the pipeline is asked for -----------------------------------------------------------

    def check_environment(self) -> None:
        self.pipeline.check_environment()  # which asks ``_target``

    def evaluate(self, task: Task, codes: Sequence[str], *, on_verdict: Optional[VerdictCallback] = None,
                 on_queue: Optional[QueueCallback] = None, cancel: Optional[threading.Event] = None,
                 on_wait: Optional[WaitCallback] = None) -> list[Verdict]:
        return self.pipeline.evaluate(task, codes, on_verdict=on_verdict, on_queue=on_queue, cancel=cancel,
                                      on_wait=on_wait)

    def remeasure(self, task: Task) -> list[Any]:
        return self.pipeline.remeasure(task)

    def close(self) -> None:
        self.compiler.cancel_all()
        self.pipeline.close()

    # -- start-up (the pipeline's environment and lanes) -------------------------------------------

    def _target(self) -> Target:
        """Connect; one-line EnvironmentProblem unless the cluster has CPUs for compiles and
        (unless compile-only) GPUs, and an architecture to build for is known."""
        self.resources = connect(self.address)
        if self.resources.get("CPU", 0) < 1:
            raise EnvironmentProblem(f"the Ray cluster at {self.address} has no CPU for compiles")
        jobs = max(1, min(MAX_PARALLEL_COMPILES, int(self.resources["CPU"])))
        self._arch = self._arch or self._requested_arch()
        lanes, opened = self.pipeline.lanes, []
        if not self.settings.compile_only and not lanes:
            lanes = opened = self._open_lanes()
            self._arch = self._arch or lanes_arch(lanes)
        if not self._arch:
            for lane in opened:
                lane.close()
            raise EnvironmentProblem("no CUDA architecture to build for: set `arch` (e.g. 9.0) or "
                                     "TORCH_CUDA_ARCH_LIST; the cluster's GPUs did not say")
        up = [lane for lane in lanes if lane.up]
        return Target(self._arch, up[0].device.name if up else None, jobs, lanes)

    def _requested_arch(self) -> Optional[str]:
        from kevin_agent.evaluate.build.flags import normalise_arch

        requested = self.settings.arch or os.environ.get("TORCH_CUDA_ARCH_LIST")
        return normalise_arch(requested) if requested else None

    def _open_lanes(self) -> list[GpuLane]:
        """One lane per GPU of the cluster, their actors placed and their devices known."""
        gpus = int(self.resources.get("GPU", 0))
        if gpus < 1:
            raise EnvironmentProblem(f"the Ray cluster at {self.address} has no GPU (start a node with "
                                     "`ray start --num-gpus N`), or evaluate compile-only")
        lanes = [RayLane(number, self) for number in range(gpus)]
        try:
            for lane in lanes:
                lane.start()
            started = time.monotonic()
            while True:
                pending = [lane for lane in lanes if not lane.up and not lane.wait_up(POLL_S)]
                waited = time.monotonic() - started
                if not pending or (len(pending) < len(lanes) and waited > LANE_START_QUORUM_S):
                    return list(lanes)
                if waited > LANE_START_TIMEOUT_S:
                    raise EnvironmentProblem(f"no GPU of the Ray cluster at {self.address} became free within "
                                             f"{LANE_START_TIMEOUT_S:.0f} s")
        except BaseException:
            for lane in lanes:
                lane.drop()
            raise

    # -- the lanes' threads --------------------------------------------------------------------

    def _serve(self, lane: GpuLane, lane_queue: LaneQueue) -> None:
        """A lane's thread: take compiled candidates while its node is up; bring it back when lost."""
        if not isinstance(lane, RayLane):
            self.pipeline.serve(lane, lane_queue)
            return
        while not lane_queue.stopped:
            if not lane.up:
                self._bring_up(lane, lane_queue)
                continue
            item = lane_queue.get()
            if item is None:
                return
            requeued = False
            try:
                if not item.batch.cancel.is_set() and item.batch.error is None:
                    requeued = self._run_or_retry(lane, item, lane_queue)
            except BaseException as err:  # the task fails, or a worker cannot start: the batch ends
                item.batch.fail(err)
            finally:
                if not requeued:
                    item.left_lanes()

    def _run_or_retry(self, lane: RayLane, item: GpuItem, lane_queue: LaneQueue) -> bool:
        """Run the item; when the lane is lost, queue it again (True) or, after ``MAX_ATTEMPTS``,
        settle it with a verdict."""
        requeued = False
        try:
            self.pipeline.run_item(lane, item)
            return False
        except LaneLost as lost:
            if item.baseline_only:
                return False  # measured ahead only: the candidates' own runs measure it instead
            counted, bounces = self._attempts.pop(id(item), (0, 0))
            counted, bounces = counted + int(lost.counted), bounces + 1
            if counted >= MAX_ATTEMPTS or bounces >= MAX_BOUNCES or lane_queue.stopped:
                reason = f"the GPU node evaluating it was lost {bounces} time(s); last: {lost}"
                item.batch.settle(item.index, crash_verdict(reason, ""))
                return False
            self._attempts[id(item)] = (counted, bounces)
            requeued = True
            lane_queue.put(item)
            return True
        finally:
            if not requeued:  # it ended here (a verdict, or an error that fails its batch)
                self._attempts.pop(id(item), None)

    def _bring_up(self, lane: RayLane, lane_queue: LaneQueue) -> None:
        """Wait a little for the lane's (new) actor; when no lane has been up for a while, fail the
        queued candidates' batches instead of letting them wait for ever."""
        try:
            if lane.wait_up(1.0):
                with self._down_lock:
                    self._all_down_since = None  # a later outage is timed from its own start
                return
        except Exception:  # the node refused (no device...): try again later, somewhere else
            time.sleep(1.0)
        with self._down_lock:
            if any(isinstance(other, RayLane) and other.up for other in self.pipeline.lanes):
                self._all_down_since = None
                return
            now = time.monotonic()
            self._all_down_since = self._all_down_since or now
            if now - self._all_down_since > NO_GPU_GRACE_S:
                self._fail_queued(lane_queue, EnvironmentProblem(
                    f"every GPU node of the Ray cluster at {self.address} was lost for over {NO_GPU_GRACE_S:.0f} s"))

    def _fail_queued(self, lane_queue: LaneQueue, error: EnvironmentProblem) -> None:
        """Fail the batches of the candidates queued now (never waits: another lane's thread may
        take the last one meanwhile)."""
        while True:
            try:
                item = lane_queue.get_nowait()
            except queue.Empty:
                return
            if item is None:
                lane_queue.stop(1)  # put the stop marker back for the other lanes
                return
            self._attempts.pop(id(item), None)
            item.batch.fail(error)
            item.left_lanes()


def lanes_arch(lanes: Sequence[GpuLane]) -> Optional[str]:
    """The architectures the lanes' GPUs say they have (None when none says)."""
    capabilities = {lane.info.get("capability") for lane in lanes if isinstance(lane, RayLane)}
    return ";".join(sorted(c for c in capabilities if c)) or None
