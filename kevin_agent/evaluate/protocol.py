"""What crosses the evaluator's process boundaries, as structured data (standard library only).

Parent -> GPU worker: the worker prints ``READY_LINE`` once warm, then reads one line on stdin,
the path of a ``WorkerJob`` JSON file. Worker -> parent: a ``WorkerReply`` JSON file written
atomically at the job's ``result_path``; no reply means the process crashed, hung or was killed.
Parent -> load_inline recorder: the candidate's path on argv; recorder -> parent: one stdout line,
``RECORD_MARKER`` + a ``RecordReply``. Both sides import this module, so nothing is matched as text.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevin_agent.data import TimingStats, Verdict
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.processes import read_child_file

READY_LINE = "READY"
RECORD_MARKER = "KEVIN_LOAD_INLINE_SPECS:"


class WorkerExit(enum.IntEnum):
    """The GPU worker's exit codes (a reply file, not the code, carries every verdict)."""

    OK = 0
    INTERNAL = 1  # a bug in the worker: traceback on stderr
    BAD_JOB = 2  # the job file is missing or malformed
    NO_CUDA = 3  # no CUDA device: one line on stderr, before READY
    ORPHANED = 5  # the parent closed our stdin (it died): stopped at once


class BadJob(Exception):
    """The job file is missing or malformed (one line)."""


@dataclass
class Baseline:
    """The reference measured once per task, GPU and settings, reused for every candidate."""

    eager: TimingStats
    compiled: Optional[TimingStats] = None  # torch.compile of the reference (None: not timed/failed)
    torch_compile_seconds: Optional[float] = None  # its build, reported apart
    flops: Optional[float] = None
    bytes_moved: Optional[float] = None
    dtype: str = "float32"  # the dominant dtype of inputs and parameters (speed of light)
    reference_kernels: Optional[int] = None  # GPU kernel launches of one reference forward
    inputs: str = ""  # shapes and dtypes of the example inputs, e.g. "float32[4096,4096]"
    gpu_name: str = ""
    gpu_uuid: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    measured_seconds: Optional[float] = None  # how long measuring it took (parent's clock, job included)
    # torch.compile's build came from Inductor's caches (a compile-ahead job filled them); None: not known
    compile_cache_hit: Optional[bool] = None
    # torch.compile was built by this worker's compile-ahead job before it took the lease (False: built
    # or loaded under the lease; see compile_cache_hit)
    built_ahead: bool = False
    stage_seconds: dict[str, float] = field(default_factory=dict)  # the worker's parts of that (bench)

    @property
    def faster_ms(self) -> float:
        """The faster of eager and torch.compile (what a kernel must beat)."""
        times = [self.eager.median_ms] + ([self.compiled.median_ms] if self.compiled else [])
        return min(times)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Baseline:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in names}
        for key in ("eager", "compiled"):
            if isinstance(values.get(key), dict):
                values[key] = TimingStats.from_dict(values[key])
        return cls(**values)


@dataclass
class WorkerJob:
    """One job for one GPU worker: judge a candidate, measure the task's baseline, or build the
    baseline's torch.compile ahead (``compile_ahead``: into the shared caches, nothing run or timed)."""

    task_source: str
    candidate_source: str  # "" for a baseline job
    result_path: Path
    settings: EvalSettings = field(default_factory=EvalSettings)
    cache_dir: Optional[Path] = None  # the build cache the parent filled (None: settings' or default)
    scratch_dir: Optional[Path] = None  # the worker's own folder for the candidate's files
    baseline: Optional[Baseline] = None  # candidate jobs: the reference's timings to compare with
    measure_baseline: bool = False  # a baseline job: time the reference only
    compile_ahead: bool = False  # build torch.compile of the reference into the caches, run nothing
    build_entries: tuple[str, ...] = ()  # the cache entries of the candidate's extensions (readable)
    protect: tuple[str, ...] = ()  # folders confined candidate code must never see (the repository)
    reply_token: str = ""  # drawn by the parent per job; a reply without it is not the worker's own
    witness_path: Optional[Path] = None  # where the worker writes checked calls' outputs for the judge

    def to_json(self) -> str:
        return json.dumps({
            "task_source": self.task_source, "candidate_source": self.candidate_source,
            "result_path": str(self.result_path), "settings": self.settings.to_dict(),
            "cache_dir": str(self.cache_dir) if self.cache_dir else None,
            "scratch_dir": str(self.scratch_dir) if self.scratch_dir else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "measure_baseline": self.measure_baseline, "compile_ahead": self.compile_ahead,
            "build_entries": list(self.build_entries),
            "protect": list(self.protect), "reply_token": self.reply_token,
            "witness_path": str(self.witness_path) if self.witness_path else None,
        })

    @classmethod
    def read(cls, path: Path) -> WorkerJob:
        """Parse a job file; BadJob with one line."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise BadJob(f"cannot read job {path}: {exc}") from exc
        missing = [k for k in ("task_source", "candidate_source", "result_path")
                   if not isinstance(raw.get(k), str)]
        if missing:
            raise BadJob(f"job {path} lacks {', '.join(missing)}")
        try:
            settings = EvalSettings.from_dict(raw.get("settings") or {}, unknown="ignore")  # an older worker
        except ValueError as exc:  # a bad value: an unknown policy or sandbox mode, a wrong type
            raise BadJob(f"job {path} has bad settings: {exc}") from exc
        cache = raw.get("cache_dir") or settings.cache_dir
        scratch = raw.get("scratch_dir")
        try:
            baseline = Baseline.from_dict(raw["baseline"]) if raw.get("baseline") else None
        except (TypeError, ValueError) as exc:
            raise BadJob(f"job {path} has a bad baseline: {exc}") from exc
        return cls(raw["task_source"], raw["candidate_source"], Path(raw["result_path"]), settings,
                   Path(cache) if cache else None, Path(scratch) if scratch else None, baseline,
                   bool(raw.get("measure_baseline")), bool(raw.get("compile_ahead")),
                   tuple(raw.get("build_entries") or ()), tuple(raw.get("protect") or ()),
                   str(raw.get("reply_token") or ""), Path(raw["witness_path"]) if raw.get("witness_path") else None)


@dataclass
class WorkerReply:
    """The worker's answer: the candidate's verdict (or the measured baseline, or the parts of a
    compile-ahead job), or why the reference task itself failed."""

    verdict: Optional[Verdict] = None
    task_failure: Optional[str] = None  # one line: the user's module fails, not the candidate
    task_failure_detail: str = ""
    baseline: Optional[Baseline] = None
    token: str = ""  # the job's ``reply_token``, echoed: what the parent checks the reply by
    compiled_ahead: Optional[CompiledAhead] = None

    def to_json(self) -> str:
        return json.dumps({
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
            "task_failure": self.task_failure, "task_failure_detail": self.task_failure_detail,
            "baseline": self.baseline.to_dict() if self.baseline is not None else None,
            "token": self.token,
            "compiled_ahead": dataclasses.asdict(self.compiled_ahead) if self.compiled_ahead is not None else None,
        })

    @classmethod
    def read(cls, path: Path) -> Optional[WorkerReply]:
        """The reply at ``path``; None when it is missing or unreadable (a crashed worker), or not a
        regular file (a link the candidate left there is never followed)."""
        try:
            raw = json.loads(read_child_file(Path(path)))
            verdict = Verdict.from_dict(raw["verdict"]) if raw.get("verdict") else None
            baseline = Baseline.from_dict(raw["baseline"]) if raw.get("baseline") else None
            ahead = CompiledAhead.from_dict(raw["compiled_ahead"]) if raw.get("compiled_ahead") else None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if verdict is None and baseline is None and ahead is None and not raw.get("task_failure"):
            return None
        return cls(verdict, raw.get("task_failure"), raw.get("task_failure_detail") or "", baseline,
                   str(raw.get("token") or ""), ahead)


@dataclass
class CompiledAhead:
    """What a compile-ahead job did: whether torch.compile built the reference (``error`` says why
    not, one line) and the worker's seconds per part (``reference``, ``baseline_compile_ahead``)."""

    ok: bool
    error: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # the worker kept its build and reads the task's baseline job from stdin next (LocalLane runs it
    # there under the lease); False: it exits, as every other worker
    waits_for_baseline: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CompiledAhead:
        seconds = raw.get("stage_seconds") or {}
        return cls(bool(raw["ok"]), str(raw.get("error") or ""), {str(k): float(v) for k, v in seconds.items()},
                   raw.get("waits_for_baseline") is True)


@dataclass
class RecordReply:
    """What the load_inline recorder found: the arguments of each call, or why it could not."""

    specs: list[dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None

    def line(self) -> str:
        return RECORD_MARKER + json.dumps({"specs": self.specs, "error": self.error})

    @classmethod
    def from_output(cls, stdout: str) -> list[RecordReply]:
        """Every well-formed reply line in ``stdout`` (the candidate may print look-alikes)."""
        found = []
        for line in stdout.splitlines():
            if not line.startswith(RECORD_MARKER):
                continue
            try:
                raw = json.loads(line[len(RECORD_MARKER):])
                found.append(cls(list(raw["specs"]), raw.get("error")))
            except (ValueError, KeyError, TypeError):
                continue
        return found
