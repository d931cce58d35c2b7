"""Shared setup for the accept tests: real temporary git repositories and stored-run records."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import git

from kevin_agent.data import Candidate, Stage, Task, TaskOrigin, TimingStats, Verdict, VerdictDetails
from kevin_agent.store import RunRecord
from kevin_agent.verdict_records import CorrectnessRecord, EnvironmentRecord, TimingRecord, TrustRecord

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
CLASS_NAME = "FusedBlock"
MODULE = "models/block.py"
SETTINGS = {"trajectories": 4, "turns": 4}


def fixture_task(name: str, class_name: str = CLASS_NAME) -> str:
    """A fixture task with its ``Model`` renamed to ``class_name`` (the user's module)."""
    return (KERNELS / f"{name}_task.py").read_text().replace("class Model(", f"class {class_name}(")


def fixture_candidate(name: str) -> str:
    return (KERNELS / f"{name}_candidate.py").read_text()


def make_repo(root: Path, *, kernel: str = "gelu", package: bool = False) -> git.Repo:
    """A repository on branch main with models/block.py (+ README) committed."""
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test User")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    (root / "models").mkdir()
    (root / MODULE).write_text(fixture_task(kernel))
    (root / "README.md").write_text("project\n")
    paths = [MODULE, "README.md"]
    if package:
        (root / "models" / "__init__.py").write_text("")
        paths.append("models/__init__.py")
    repo.index.add(paths)
    repo.index.commit("initial")
    return repo


def good_timing() -> TimingRecord:
    """The timing record of ``good_verdict`` (a fresh one: change it with ``dataclasses.replace``)."""
    return TimingRecord(eager=TimingStats(0.758, 0.76, 0.75, 0.8, 0.01, 100),
                        compiled=TimingStats(0.498, 0.5, 0.49, 0.52, 0.01, 100),
                        kernel=TimingStats(0.412, 0.41, 0.40, 0.43, 0.01, 100),
                        speedup_vs_eager=1.84, speedup_vs_compile=1.21, sol_fraction=0.62)


def good_verdict(timing: Optional[TimingRecord] = None, trust: Optional[TrustRecord] = None,
                 environment: Optional[EnvironmentRecord] = None) -> Verdict:
    """A timed, correct verdict on an H200; ``timing``, ``trust`` or ``environment`` replace its records."""
    details = VerdictDetails(
        correctness=CorrectnessRecord(trials_passed=5, trials_total=5, max_abs_error=2.4e-7, atol=1e-4, rtol=1e-4),
        timing=timing or good_timing(), trust=trust or TrustRecord(),
        environment=environment or EnvironmentRecord(gpu_name="NVIDIA H200", torch_version="2.14.1",
                                                     cuda_version="13.0"))
    return Verdict(Stage.TIMING, True, "correct", details)


def make_record(origin: Optional[Path], code: str, verdict: Optional[Verdict] = None,
                run_id: str = "r20261202-1", candidate_id: str = "t1.3",
                class_name: str = CLASS_NAME) -> RunRecord:
    task = Task(
        source=fixture_task("gelu", "Model"), class_name=class_name,
        origin=TaskOrigin(str(origin), class_name, 1, 20) if origin is not None else None,
    )
    candidate = Candidate(trajectory=1, turn=3, code=code, id=candidate_id, summary="fused")
    return RunRecord(run_id=run_id, task=task, settings=dict(SETTINGS), status="done",
                     created="2026-12-02T10:00:00", candidates=[(candidate, verdict or good_verdict())])


def committed_paths(repo: git.Repo, rev: str = "HEAD") -> set[str]:
    commit = repo.commit(rev)
    parent = commit.parents[0]
    return {str(d.b_path or d.a_path) for d in parent.diff(commit)}
