"""Run each candidate in its own killable GPU worker process.

A ``WorkerPool`` starts ``python -m kevin_agent.evaluate.worker`` (``evaluate.protocol``:
``READY`` on stdout, then one job path on stdin, then a reply file) in its own process group,
with a scratch working directory and an environment without secrets. One spare worker is kept
started ahead so process start, torch import and CUDA init are hidden; a process never evaluates
two candidates. A crash, hang or exit without a result becomes a LOAD verdict, never an exception.
Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.errors import EnvironmentProblem
from kevin_agent.evaluate.judgement import REPORT_LIMIT_BYTES, JudgeReport, judged_verdict, needs_judge
from kevin_agent.evaluate.observe.channel import ObserveChannel
from kevin_agent.evaluate.observe.report import compile_ratio_of
from kevin_agent.evaluate.processes import (
    crash_reason,
    crash_verdict,
    kill_group,
    read_child_file,
    scrubbed_environment,
    tail_text,
)
from kevin_agent.evaluate.protocol import READY_LINE, Baseline, CompiledAhead, WorkerJob, WorkerReply
from kevin_agent.evaluate.sandbox.limits import limit_message
from kevin_agent.evaluate.sandbox.relay import EXIT_LIMIT
from kevin_agent.evaluate.spares import EXPECTED_JOB_S, SpareSizer

DEFAULT_WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "kevin_agent.evaluate.worker")
DEFAULT_JUDGE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "kevin_agent.evaluate.judge")
_POLL_S = 0.02
# A reply without the job's token was written by something other than the worker's own code: the
# candidate (its code runs in the worker's process and may write the job folder) forging a verdict.
FORGED_REPLY = ("the worker's reply did not carry this job's token: something other than the judge wrote it "
                "(a forged verdict), so nothing in it counts")

@dataclass
class WorkerResult:
    """What one worker process produced for one job."""

    verdict: Verdict
    pid: int
    seconds: float  # from handing the job over to the end of the process
    returncode: Optional[int]
    crashed: bool  # no usable result: signal, exit, timeout or cancel
    cancelled: bool = False
    stderr_tail: str = ""
    startup_s: Optional[float] = None  # spawn -> READY of this process (hidden when it was the spare)
    waited_s: float = 0.0  # how long the caller waited for a ready process (the visible start cost)
    task_failure: Optional[str] = None  # the reference task itself failed (WorkerReply.task_failure)
    baseline: Optional[Baseline] = None  # a baseline job's measurement
    compiled_ahead: Optional[CompiledAhead] = None  # a compile-ahead job's outcome
    ended_at: float = field(default_factory=time.monotonic)  # the parent's clock when the job ended (bench)


@dataclass
class _Worker:
    proc: subprocess.Popen
    scratch: Path
    stdout_path: Path
    stderr_path: Path
    started: float
    spawned_wall: float
    ready: bool = False
    ready_wall: Optional[float] = None
    judge: Optional[subprocess.Popen] = None  # the judge beside it (``evaluate.judge``), started with it
    observed: bool = False  # the judge took this job at hand-over and observes the worker's calls

    @property
    def startup_s(self) -> Optional[float]:
        return None if self.ready_wall is None else max(0.0, self.ready_wall - self.spawned_wall)

    @property
    def pid(self) -> int:
        return self.proc.pid


Gate = Callable[[], contextlib.AbstractContextManager[object]]  # held from job handover to the process's end
Confine = Callable[[Path, Sequence[str]], list[str]]  # (job folder, command) -> the confined command


class WorkerPool:
    """Spawns one fresh worker per job, with ``spares`` started ahead (a ready one is waiting).

    ``command`` replaces the worker command (tests use stand-in workers). Beside each worker a
    judge process starts (``judge_command``; by default with the default worker command only):
    a verdict that passed counts only when the judge confirms its outputs (``judgement``); ``judge=False``
    starts none (jobs that judge no candidate). ``base_env`` is the environment to scrub (default:
    ``os.environ`` at spawn time).
    ``max_spares`` (default ``spares``): how far the spares may grow where workers start slower
    than jobs end (``spares.SpareSizer``), sized from each start as soon as READY is seen.
    ``on_start`` hears each of this pool's worker starts in seconds (a compile-ahead pool tells
    the lane's pool: ``count_start``).
    Thread-safe for one caller at a time; ``close()`` may be called from any thread.
    """

    def __init__(
        self,
        command: Optional[Sequence[str]] = None,
        *,
        run_timeout_s: float = 180.0,
        start_timeout_s: float = 180.0,
        spare: bool = True,
        spares: int = 1,
        scratch_root: Optional[Path] = None,
        base_env: Optional[Mapping[str, str]] = None,
        extra_env: Optional[Mapping[str, str]] = None,
        keep_scratch: bool = False,
        confine: Optional[Confine] = None,
        judge_command: Optional[Sequence[str]] = None,
        judge_timeout_s: float = 180.0,
        judge: bool = True,
        max_spares: Optional[int] = None,
        on_start: Optional[Callable[[float], None]] = None,
        observe: bool = False,
    ) -> None:
        self.command = tuple(command) if command else DEFAULT_WORKER_COMMAND
        self.judge_command = tuple(judge_command) if judge_command else (None if command else DEFAULT_JUDGE_COMMAND)
        if not judge:
            self.judge_command = None
        # the judge runs and reads the worker's calls itself (``evaluate.observe``; ``EvalSettings.observe``)
        self.observe = bool(self.judge_command) and observe
        self.judge_timeout_s = judge_timeout_s
        self.run_timeout_s = run_timeout_s
        self.start_timeout_s = start_timeout_s
        self.spares = max(0, spares) if spare else 0
        self.sizer = SpareSizer(self.spares, max_spares if max_spares is not None else self.spares, EXPECTED_JOB_S)
        self.on_start = on_start
        self.base_env = base_env
        self.extra_env = dict(extra_env or {})
        self.keep_scratch = keep_scratch
        self.confine = confine  # the sandbox: each worker confined to its own job folder
        self._own_root = scratch_root is None
        self.scratch_root = Path(scratch_root or tempfile.mkdtemp(prefix="kevin-workers-"))
        self.scratch_root.mkdir(parents=True, exist_ok=True)
        self._spare_workers: list[_Worker] = []
        self._running: Optional[_Worker] = None
        self._kept: Optional[_Worker] = None  # a compile-ahead job's worker waiting for its baseline job
        self._lock = threading.Lock()
        self._closed = False
        self._counter = 0

    # -- process management ------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        self._counter += 1
        scratch = Path(tempfile.mkdtemp(prefix=f"job{self._counter}-", dir=self.scratch_root))
        work = scratch / "work"
        work.mkdir()
        stdout_path, stderr_path = scratch / "stdout.log", scratch / "stderr.log"
        env = scrubbed_environment(self.base_env, scratch=str(scratch))  # HOME and TMPDIR: its own folder
        env.update(self.extra_env)
        channel = ObserveChannel.make(scratch) if self.observe else None
        try:
            with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
                command = self.confine(scratch, self.command) if self.confine else list(self.command)
                proc = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    cwd=work,
                    env={**env, **(channel.worker_env if channel else {})},
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=channel.worker_fds if channel else (),
                )
            worker = _Worker(proc, scratch, stdout_path, stderr_path, time.monotonic(), time.time())
            if self.judge_command:
                worker.judge = self._spawn_judge(scratch, env, channel)
        finally:
            if channel is not None:
                channel.close()  # the children hold their ends; the parent holds none
        return worker

    def _spawn_judge(self, scratch: Path, env: Mapping[str, str],
                     channel: Optional[ObserveChannel]) -> Optional[subprocess.Popen]:
        """The judge beside a new worker: its stdin and stdout are pipes only this process holds
        (its report comes back there, out of the candidate's reach), and its end of the channel
        to the worker it observes; None when it cannot start."""
        assert self.judge_command is not None
        folder = scratch / "judge"
        folder.mkdir()
        command = self.confine(scratch, self.judge_command) if self.confine else list(self.judge_command)
        try:
            with open(scratch / "judge-stderr.log", "wb") as err:
                return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                        cwd=folder, env={**env, **(channel.judge_env if channel else {})},
                                        start_new_session=True, close_fds=True,
                                        pass_fds=channel.judge_fds if channel else ())
        except OSError:  # the verdict then says the judge did not report: fail closed
            return None

    def start_spare(self, count: Optional[int] = None) -> None:
        """Top the waiting spares up to ``count`` (default: ``sizer.wanted()``, ``spares`` until
        starts and jobs were seen, at most ``max_spares``); dead ones are replaced."""
        wanted = self.sizer.wanted() if count is None else min(count, self.sizer.wanted())
        with self._lock:
            if self._closed:
                return
            for dead in [w for w in self._spare_workers if w.proc.poll() is not None]:
                self._spare_workers.remove(dead)
                self._discard(dead)
            while len(self._spare_workers) < wanted:
                self._spare_workers.append(self._spawn())

    def _take_worker(self) -> _Worker:
        """The oldest live spare (ready first), else a new process."""
        with self._lock:
            spares, self._spare_workers = self._spare_workers, []
        worker = None
        for candidate in spares:
            if worker is None and candidate.proc.poll() is None:
                worker = candidate
            elif candidate.proc.poll() is not None:
                self._discard(candidate)  # a spare that died while waiting: never blame a candidate
            else:
                with self._lock:
                    self._spare_workers.append(candidate)
        return self._claim(worker or self._spawn())

    def _claim(self, worker: _Worker) -> _Worker:
        """Mark ``worker`` as this pool's running one, so ``close()`` kills it even while it starts."""
        with self._lock:
            self._running = worker
        return worker

    def _saw_ready(self, worker: _Worker) -> bool:
        if not worker.ready:
            try:
                text = read_child_file(worker.stdout_path, 1024 * 1024).decode(errors="replace")
            except OSError:  # missing, a link or not a regular file: never followed

                return False
            worker.ready = any(line.strip() == READY_LINE for line in text.splitlines())
            if worker.ready:
                try:  # the file's modification time is when READY was written
                    worker.ready_wall = worker.stdout_path.stat().st_mtime
                except OSError:
                    worker.ready_wall = time.time()
                self._started(worker)
        return worker.ready

    def _started(self, worker: _Worker) -> None:
        """A worker's start seen (once, at READY): it sizes the spares, and ``on_start`` hears it."""
        seconds = worker.startup_s
        if seconds is None:
            return
        self.sizer.started(seconds)
        if self.on_start is not None:
            self.on_start(seconds)

    def count_start(self, seconds: float) -> None:
        """A worker of another pool on this GPU (a compile-ahead job's) took ``seconds`` to start:
        it sizes these spares as one of ours would, and they are topped up at once, so that they
        start while the first builds compile rather than once the first candidates run."""
        self.sizer.started(seconds)
        if self.spares:
            self.start_spare()

    def _wait_ready(self, worker: _Worker, cancel: Optional[threading.Event]) -> bool:
        deadline = worker.started + self.start_timeout_s
        while not self._saw_ready(worker):
            if worker.proc.poll() is not None or time.monotonic() > deadline:
                return self._saw_ready(worker)
            if self._closed or (cancel is not None and cancel.is_set()):
                return False
            time.sleep(_POLL_S)
        return True

    def _discard(self, worker: _Worker) -> None:
        for proc in (worker.proc, worker.judge):
            if proc is None:
                continue
            kill_group(proc)
            for pipe in (proc.stdin, proc.stdout):
                if pipe:
                    try:
                        pipe.close()
                    except OSError:
                        pass
        if not self.keep_scratch:  # the candidate shaped it: no recursion on its depth, never raises
            from kevin_agent.evaluate.processes import remove_tree

            remove_tree(worker.scratch)

    def _start_failure(self, worker: _Worker) -> EnvironmentProblem:
        code = worker.proc.poll()
        what = "did not print READY in time" if code is None else f"exited with code {code}"
        tail = tail_text(worker.stderr_path, lines=3).replace("\n", " | ")
        return EnvironmentProblem(
            f"the GPU worker ({' '.join(self.command[-2:])}) {what} before taking a job"
            + (f": {tail}" if tail else "")
        )

    # -- the job -----------------------------------------------------------------------------
    def run(self, job: WorkerJob, cancel: Optional[threading.Event] = None, start_next: bool = True,
            timeout_s: Optional[float] = None, gate: Optional[Gate] = None, keep: bool = False) -> WorkerResult:
        """Evaluate one job in a fresh process (its result and scratch paths are set here).

        With ``start_next`` the spares are topped up as soon as this job is handed over (leave it
        off for the last job of a batch, so no process starts up beside the timing). ``timeout_s``
        replaces the pool's run limit for this job; ``gate`` (the GPU lease) is held from handing
        the job over until the process ended. ``keep`` (a compile-ahead job): a worker that kept
        its build stays, waiting for the task's baseline job (``run_kept``). Raises
        ``EnvironmentProblem`` only when the worker cannot start twice in a row.
        """
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        entered = time.monotonic()
        worker = self._take_worker()
        stopped = lambda: self._closed or (cancel is not None and cancel.is_set())  # noqa: E731
        if not self._wait_ready(worker, cancel):
            if stopped():
                self._discard(worker)
                return _cancelled_result(worker.pid)
            self._discard(worker)
            worker = self._claim(self._spawn())  # one retry with a brand-new process
            if not self._wait_ready(worker, cancel):
                problem = self._start_failure(worker)
                self._discard(worker)
                if stopped():
                    return _cancelled_result(worker.pid)
                raise problem
        return self._run_gated(worker, job, cancel, (time.monotonic() - entered, start_next), timeout_s, gate, keep)

    def run_kept(self, job: WorkerJob, cancel: Optional[threading.Event] = None, timeout_s: Optional[float] = None,
                 gate: Optional[Gate] = None) -> Optional[WorkerResult]:
        """The baseline job in the worker a compile-ahead job kept (its build runs there, under
        ``gate``); None when none is kept or it died meanwhile (run it as any job)."""
        with self._lock:
            worker, self._kept = self._kept, None
        if worker is None or worker.proc.poll() is not None or self._closed:
            if worker is not None:
                self._discard(worker)
            return None
        self._claim(worker)
        (worker.scratch / "result.json").unlink(missing_ok=True)  # the build's reply
        return self._run_gated(worker, job, cancel, (0.0, False), timeout_s, gate, False)

    def _run_gated(self, worker: _Worker, job: WorkerJob, cancel: Optional[threading.Event],
                   waited_and_next: tuple[float, bool], timeout_s: Optional[float], gate: Optional[Gate],
                   keep: bool) -> WorkerResult:
        """``job`` on the ready ``worker`` inside ``gate``; the worker is discarded after, unless kept."""
        try:
            with gate() if gate is not None else contextlib.nullcontext():
                if self._closed or (cancel is not None and cancel.is_set()):
                    return _cancelled_result(worker.pid)
                limit = timeout_s if timeout_s is not None else self.run_timeout_s
                result = self._run_on(worker, job, cancel, waited_and_next, limit, keep)
            result.startup_s = worker.startup_s
            self._size_spares(job, result)
            return result
        finally:
            with self._lock:
                self._running = None
                kept = worker is self._kept
            if not kept:
                self._discard(worker)

    def _size_spares(self, job: WorkerJob, result: WorkerResult) -> None:
        """Feed the sizer a candidate's job (not a baseline or build ahead; starts: ``_started``)."""
        if not (job.measure_baseline or job.compile_ahead) and result.seconds > 0:
            self.sizer.ran(result.seconds)

    def _hand_over(self, worker: _Worker, job: WorkerJob) -> WorkerJob:
        """Write the job (its paths and reply token set) and its path to the worker's stdin."""
        job = dataclasses.replace(job, result_path=worker.scratch / "result.json", scratch_dir=worker.scratch / "work",
                                  reply_token=secrets.token_hex(16),
                                  witness_path=worker.scratch / "witness" if self.judge_command else None)
        job_path = worker.scratch / "job.json"
        job_path.write_text(job.to_json())
        if worker.judge is not None and self._observes(job):
            worker.observed = self._send_judge(worker.judge, _judge_line(job, observe=True))
        with self._lock:
            self._running = worker
        try:  # stdin stays open: the worker exits when it closes (this process died)
            assert worker.proc.stdin is not None
            worker.proc.stdin.write((str(job_path) + "\n").encode())
            worker.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died right away; the exit status says why
        return job

    def _kept_build(self, worker: _Worker, job: WorkerJob) -> Optional[WorkerReply]:
        """A compile-ahead job's reply, once written, where the worker says it waits for its baseline job."""
        path = job.result_path
        if not job.compile_ahead or not path.exists():
            return None
        reply = WorkerReply.read(path)
        if reply is None or reply.compiled_ahead is None or not reply.compiled_ahead.waits_for_baseline:
            return None
        return reply if hmac.compare_digest(reply.token, job.reply_token) else None

    def _run_on(self, worker: _Worker, job: WorkerJob, cancel: Optional[threading.Event],
                waited_and_next: tuple[float, bool], limit_s: float, keep: bool = False) -> WorkerResult:
        waited_s, start_next = waited_and_next
        job = self._hand_over(worker, job)
        handed = time.monotonic()
        if start_next:
            self.start_spare()  # the next candidate's process starts while this one runs
        timed_out = cancelled = False
        deadline = handed + limit_s
        while worker.proc.poll() is None:
            kept = self._kept_build(worker, job) if keep else None
            if kept is not None and kept.compiled_ahead is not None:
                with self._lock:
                    self._kept = worker
                return _ahead_result(kept.compiled_ahead, worker.pid, time.monotonic() - handed, None,
                                     tail_text(worker.stderr_path), waited_s)
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(_POLL_S)
        kill_group(worker.proc)  # the whole group: stray grandchildren of a finished worker die too
        return self._collect(worker, job, time.monotonic() - handed, (timed_out, cancelled), waited_s, limit_s)

    def _collect(self, worker: _Worker, job: WorkerJob, seconds: float, stops: tuple[bool, bool], waited_s: float,
                 limit_s: float) -> WorkerResult:
        """The ended worker's result: its reply (judged where it needs the judge), or why there is none."""
        timed_out, cancelled = stops
        result_path = job.result_path
        handed = time.monotonic() - seconds
        returncode = worker.proc.returncode
        stderr_tail = tail_text(worker.stderr_path)
        if cancelled:
            return _cancelled_result(worker.pid, seconds)
        reply = None if timed_out else WorkerReply.read(result_path)
        if reply is not None and not hmac.compare_digest(reply.token, job.reply_token):
            return WorkerResult(crash_verdict(FORGED_REPLY, stderr_tail), worker.pid, seconds, returncode, True,
                                stderr_tail=stderr_tail, waited_s=waited_s)
        if reply is not None and reply.compiled_ahead is not None:
            return _ahead_result(reply.compiled_ahead, worker.pid, seconds, returncode, stderr_tail, waited_s)
        if reply is not None and (reply.verdict is not None or reply.baseline is not None):
            verdict = reply.verdict or Verdict(Stage.TIMING, True, "baseline measured", VerdictDetails())
            if reply.verdict is not None and self.judge_command and needs_judge(verdict):
                judging = time.monotonic()
                report, why = self._judge(worker, job)
                ratio = compile_ratio_of(job.baseline.eager, job.baseline.compiled) if job.baseline else None
                verdict = judged_verdict(verdict, report, job.settings.seed, job.settings.correctness_trials, why,
                                         observed=self._observes(job), compile_ratio=ratio)
                verdict.details.environment.stage_seconds["judge"] = round(time.monotonic() - judging, 4)
                seconds = time.monotonic() - handed
            return WorkerResult(verdict, worker.pid, seconds, returncode, False, stderr_tail=stderr_tail,
                                waited_s=waited_s, baseline=reply.baseline)
        if reply is not None:  # the reference task itself failed: the user's problem, not a crash
            return WorkerResult(crash_verdict("the reference task failed", reply.task_failure_detail),
                                worker.pid, seconds, returncode, True, stderr_tail=stderr_tail,
                                waited_s=waited_s, task_failure=reply.task_failure)
        reason = crash_reason(returncode, timed_out, limit_s, result_path.exists())
        if returncode == EXIT_LIMIT and limit_message(stderr_tail):  # a sandbox bound stopped it
            reason = limit_message(stderr_tail) or reason
        return WorkerResult(crash_verdict(reason, stderr_tail), worker.pid, seconds, returncode, True,
                            stderr_tail=stderr_tail, waited_s=waited_s)

    def _judge(self, worker: _Worker, job: WorkerJob) -> tuple[Optional[JudgeReport], str]:
        """The judge's report on the ended worker's witness, or None and why there is none."""
        judge = worker.judge
        if judge is None:
            return None, "it could not be started"
        if judge.poll() is not None:
            return None, f"it exited with code {judge.returncode} before judging"
        if self._observes(job) and not worker.observed:
            return None, "it could not be given the job beside the worker's"
        # observed: the job went with the worker's; this line says the worker ended (its witness is whole)
        line = json.dumps({"worker_ended": True}) + "\n" if worker.observed else _judge_line(job, observe=False)
        try:
            assert judge.stdin is not None and judge.stdout is not None
            judge.stdin.write(line.encode())
            judge.stdin.close()
            out = read_line(judge.stdout, self.judge_timeout_s, REPORT_LIMIT_BYTES)
        except (OSError, ValueError) as exc:
            kill_group(judge)
            return None, f"it could not be reached ({exc})"
        if out is None:
            kill_group(judge)
            return None, f"it did not finish within {self.judge_timeout_s:g} s"
        kill_group(judge, wait=False)  # the report is in; reaped with the worker, after the GPU's lease
        report = JudgeReport.parse(out.decode("utf-8", errors="replace"))
        if report is None:
            tail = tail_text(worker.scratch / "judge-stderr.log", lines=2).replace("\n", " | ")
            return None, "it ended without a report" + (f": {tail}" if tail else "")
        return report, ""

    def _observes(self, job: WorkerJob) -> bool:
        """This pool observes, and ``job`` runs a candidate (a baseline or a build ahead runs none)."""
        return self.observe and not (job.measure_baseline or job.compile_ahead) and job.witness_path is not None

    @staticmethod
    def _send_judge(judge: subprocess.Popen, line: str) -> bool:
        """Write ``line`` to the judge's stdin (kept open); False when it is gone."""
        try:
            assert judge.stdin is not None
            judge.stdin.write(line.encode())
            judge.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Kill the spare and any running worker; remove scratch directories."""
        with self._lock:
            self._closed = True
            spares, self._spare_workers = self._spare_workers, []
            running, kept, self._kept = self._running, self._kept, None
        for spare in spares + ([kept] if kept is not None else []):
            self._discard(spare)
        if running is not None:
            kill_group(running.proc)
            if running.judge is not None:
                kill_group(running.judge)
        if self._own_root and not self.keep_scratch:
            shutil.rmtree(self.scratch_root, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def has_kept(self) -> bool:
        """A compile-ahead job's worker waits here for its baseline job (``run_kept``)."""
        with self._lock:
            return self._kept is not None and self._kept.proc.poll() is None

    @property
    def spare_pid(self) -> Optional[int]:
        spares = list(self._spare_workers)
        return spares[0].pid if spares else None

    @property
    def spare_pids(self) -> list[int]:
        return [w.pid for w in list(self._spare_workers)]


def _judge_line(job: WorkerJob, observe: bool) -> str:
    return json.dumps({"task_source": job.task_source, "seed": job.settings.seed, "witness": str(job.witness_path),
                       "observe": observe}) + "\n"


def read_line(pipe: IO[bytes], timeout_s: float, limit: int) -> Optional[bytes]:
    """What ``pipe`` carries up to its first line break, its end or ``limit`` bytes; None when
    nothing ended it within ``timeout_s`` (the writer may stay alive: nothing waits for its exit)."""
    deadline = time.monotonic() + timeout_s
    data = b""
    fd = pipe.fileno()
    while b"\n" not in data and len(data) < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data[:limit]


def _ahead_result(ahead: CompiledAhead, pid: int, seconds: float, returncode: Optional[int], stderr_tail: str,
                  waited_s: float) -> WorkerResult:
    """A compile-ahead job's result: built (ok) or why not, no candidate verdict."""
    message = "torch.compile of the reference built ahead" if ahead.ok else ahead.error
    return WorkerResult(Verdict(Stage.COMPILE, ahead.ok, message, VerdictDetails()), pid, seconds, returncode, False,
                        stderr_tail=stderr_tail, waited_s=waited_s, compiled_ahead=ahead)


def _cancelled_result(pid: int, seconds: float = 0.0) -> WorkerResult:
    verdict = Verdict(Stage.LOAD, False, "The evaluation was cancelled before this answer was run.",
                      VerdictDetails(error="cancelled"))
    return WorkerResult(verdict, pid, seconds, None, True, cancelled=True)
