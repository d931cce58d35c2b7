"""What accepting a candidate would write: ``plan_accept`` builds an ``AcceptPlan`` (no writes)."""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from kevin_agent.accept.files import check_no_conflicts, read_existing
from kevin_agent.accept.message import commit_message
from kevin_agent.accept.names import ArtifactNames
from kevin_agent.accept.render import Provenance, module_files
from kevin_agent.accept.render_test import ToleranceSettings, render_test_file
from kevin_agent.accept.signature import find_class
from kevin_agent.data import Candidate, Verdict
from kevin_agent.errors import UserInputError
from kevin_agent.run_table import better_choice, verdict_conclusion
from kevin_agent.safe_text import terminal_safe
from kevin_agent.store import find_repo_root
from kevin_agent.verdict_text import gpu_short, is_replayed, measured_label, untrusted_label

if TYPE_CHECKING:
    from kevin_agent.store import RunRecord

CONFIG_KEY = "accept_dir"  # [tool.kevin] accept_dir = "kernels": where accepted files go

_COLORS = {"+": "\x1b[32m", "-": "\x1b[31m", "@": "\x1b[36m"}
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"


@dataclass
class AcceptPlan:
    """The files accepting would write and the commit message; nothing is written yet."""

    files: dict[Path, str]  # absolute path -> content
    commit_message: str
    repo_root: Optional[Path] = None  # the git repository holding the files (None: not in one)
    run_id: str = ""
    candidate_id: str = ""
    class_name: str = ""
    source_path: Optional[Path] = None
    notes: list[str] = field(default_factory=list)  # lines for the user (e.g. torch.compile is faster)

    def label(self, path: Path) -> str:
        """The path as shown to the user: relative to the repository (or cwd) where possible."""
        base = self.repo_root or Path.cwd()
        try:
            return Path(os.path.relpath(path, base)).as_posix()
        except ValueError:
            return str(path)

    def diff(self, color: bool = False) -> str:
        """Unified diff from what is on disk now to what accepting writes."""
        chunks: list[str] = []
        for path in sorted(self.files):
            old = read_existing(path)
            name = self.label(path)
            lines = difflib.unified_diff(
                (old or "").splitlines(keepends=True), self.files[path].splitlines(keepends=True),
                fromfile="/dev/null" if old is None else f"a/{name}", tofile=f"b/{name}",
            )
            # shown for review: the model's control characters (an escape that hides a line, a bidi
            # override that reorders one) are spelled out, so what is read is what gets written
            chunks.extend(_paint(terminal_safe(line if line.endswith("\n") else line + "\n"), color) for line in lines)
        return "".join(chunks)


def _paint(line: str, color: bool) -> str:
    if not color:
        return line
    if line.startswith(("+++", "---")):
        return f"{_BOLD}{line.rstrip(chr(10))}{_RESET}\n"
    code = _COLORS.get(line[:1])
    return f"{code}{line.rstrip(chr(10))}{_RESET}\n" if code else line


def choose_candidate(record: RunRecord, candidate_id: Optional[str],
                     force: bool = False) -> tuple[Candidate, Verdict]:
    """The named candidate, or the run's best; refuses ones that are not correct, and ones the
    evaluator does not trust unless ``force`` (``kevin accept --force``)."""
    if candidate_id is None:
        best = record.best()
        if best is None:
            raise UserInputError(f"run {record.run_id} has no correct, timed candidate to accept "
                                 f"(see `kevin show {record.run_id}`){_untrusted_hint(record)}")
        return best
    candidate, verdict = record.candidate(candidate_id)
    if verdict is None:
        raise UserInputError(f"candidate {candidate_id} of run {record.run_id} has not been evaluated yet")
    if not verdict.passed:
        raise UserInputError(f"candidate {candidate_id} is not correct (it stopped at "
                             f"{verdict.stage.value}): only a correct kernel can be accepted")
    if not verdict.trusted and not force:
        raise UserInputError(f"candidate {candidate_id} is {untrusted_label(verdict)}. It earned nothing "
                             "and is not accepted; pass --force to accept it anyway (the commit "
                             "message will say it is not trusted)")
    if not candidate.code:
        raise UserInputError(f"candidate {candidate_id} has no code")
    return candidate, verdict


def _untrusted_hint(record: RunRecord) -> str:
    """"; t1.1 matched but is not trusted: ...": what --force could accept, when any."""
    for candidate, verdict in record.candidates:
        if verdict is not None and verdict.passed and not verdict.trusted:
            return (f"; {candidate.id} matched the reference but is {untrusted_label(verdict, short=True)} "
                    f"(`kevin accept {record.run_id} {candidate.id} --force` accepts it anyway)")
    return ""


def _origin_path(record: RunRecord, repo_root: Optional[Path]) -> Path:
    origin = record.task.origin
    if origin is None:
        raise UserInputError(f"run {record.run_id} has no origin file (its task did not come from a "
                             f"file), so there is no module to put the kernel next to")
    path = Path(origin.path)
    if not path.is_absolute():
        path = (repo_root or Path.cwd()) / path
    if not path.is_file():
        raise UserInputError(f"{origin.path}, the module run {record.run_id} was made from, no longer exists")
    return path.resolve()


def _original_class(path: Path, class_name: str) -> ast.ClassDef:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError) as err:
        raise UserInputError(f"cannot read {path}: {err}") from None
    found = find_class(tree, class_name)
    if found is None:
        raise UserInputError(f"{path} no longer defines class {class_name}")
    return found


def _target_dir(target_dir: Optional[Path], repo_root: Optional[Path], source: Path) -> Path:
    if target_dir is None:
        from kevin_agent.config import load_config

        configured: Any = load_config(repo_root or source.parent).get(CONFIG_KEY)
        if not configured:
            return source.parent
        target_dir = Path(str(configured))
    if not target_dir.is_absolute():
        target_dir = (repo_root or source.parent) / target_dir
    return target_dir.resolve()


def plan_accept(record: RunRecord, candidate_id: Optional[str] = None, repo_root: Optional[Path] = None,
                *, target_dir: Optional[Path] = None, force: bool = False) -> AcceptPlan:
    """Everything accepting would write, or UserInputError naming why it is refused (``force``:
    accept a candidate the evaluator does not trust, saying so in the commit message)."""
    candidate, verdict = choose_candidate(record, candidate_id, force)
    source = _origin_path(record, repo_root)
    repo_root = Path(repo_root).resolve() if repo_root is not None else find_repo_root(source.parent)
    class_name = record.task.origin.class_name if record.task.origin else record.task.class_name
    original = _original_class(source, class_name)
    names = ArtifactNames(class_name, _target_dir(target_dir, repo_root, source))
    source_label = f"{_relative(source, repo_root)}::{class_name}"
    d = verdict.details
    prov = Provenance(source_label, record.run_id, candidate.id, d.timing.speedup_vs_eager,
                      d.timing.speedup_vs_compile, gpu_short(d) or "unknown GPU")
    files = module_files(candidate.code or "", names, prov, original)
    plan = AcceptPlan(files=files, commit_message="", repo_root=repo_root, run_id=record.run_id,
                      candidate_id=candidate.id, class_name=class_name, source_path=source)
    c = d.correctness
    atol = c.atol
    if c.fp64_accepted and c.max_abs_error is not None:  # accepted against float64, not eager's 1e-4:
        atol = max(atol or 0.0, 2.0 * c.max_abs_error)  # the test compares with eager, give it that margin
    tolerances = ToleranceSettings.from_tolerances(atol, c.rtol)
    files.update(render_test_file(names, source, source_label, tolerances, plan.label(names.test_path)))
    check_no_conflicts(files, plan.label)
    plan.commit_message = commit_message(
        class_name=class_name, source_label=source_label, run_id=record.run_id, candidate=candidate,
        verdict=verdict, settings=dict(record.settings or {}), paths=[plan.label(p) for p in sorted(files)],
    )
    if not verdict.trusted:
        plan.notes.append(f"{untrusted_label(verdict)}: accepted only because of --force; the commit "
                          "message says so")
    if is_replayed(d):
        plan.notes.append(f"verdict {measured_label(d)}: the kernel was not checked or timed on "
                          "this machine; run the generated test on a GPU before relying on it")
    if better_choice(d) != "kernel":  # the conclusion every face draws from this verdict, and where it was measured
        plan.notes.append(verdict_conclusion(candidate.id, d, record.gpu_name, kernel="kernel"))
    return plan


def _relative(path: Path, root: Optional[Path]) -> str:
    base = root or path.parent
    return Path(os.path.relpath(path, base)).as_posix()
