"""Carry out an ``AcceptPlan``: write the files (all or nothing) and commit exactly them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.accept import git_ops
from kevin_agent.accept.files import check_no_conflicts, write_files
from kevin_agent.accept.plan import AcceptPlan
from kevin_agent.errors import UserInputError

NOT_A_REPO_HINT = ": pass --no-commit to write the files without committing"
HOOKS_CONFIG_KEY = "run_hooks"  # [tool.kevin] run_hooks = true: run pre-commit / commit-msg hooks


def hooks_setting(run_hooks: Optional[bool], repo_root: Optional[Path]) -> bool:
    """Whether commits run the repository's hooks: the flag when given, else ``[tool.kevin]
    run_hooks``, else False (docs/accept.md says why)."""
    if run_hooks is not None:
        return run_hooks
    from kevin_agent.config import load_config

    config = load_config(repo_root) if repo_root is not None else {}
    value = config.get(HOOKS_CONFIG_KEY, False)
    if isinstance(value, bool):
        return value
    where = getattr(config, "source", None) or "the config"
    raise UserInputError(f"bad value for {HOOKS_CONFIG_KEY!r} in {where}: {value!r} (expected true or false)")


@dataclass
class AcceptResult:
    sha: Optional[str]  # the new commit, None with commit=False
    message: str  # the commit message (also when not committed: what it would have been)
    paths: list[Path] = field(default_factory=list)
    branch: Optional[str] = None  # the branch committed on


def preflight(plan: AcceptPlan, *, commit: bool = True, branch: Optional[str] = None) -> None:
    """Every refusal accept() can make before writing anything (call it before asking the user)."""
    check_no_conflicts(plan.files, plan.label)
    if not commit:
        if branch is not None:
            raise UserInputError("--branch needs a commit: drop --no-commit or --branch")
        return
    start = plan.repo_root or next(iter(plan.files)).parent
    repo = _repo(plan, start)
    try:
        git_ops.check_branch_state(repo, branch)
        git_ops.check_paths_committable(repo, plan.files)
    except git_ops.git_errors() as err:
        raise UserInputError(git_ops.one_line(err)) from None


def _repo(plan: AcceptPlan, start: Path):
    if plan.repo_root is None:
        raise UserInputError(f"{start} is not inside a git repository{NOT_A_REPO_HINT}")
    return git_ops.open_repo(plan.repo_root, hint=NOT_A_REPO_HINT)


def accept(plan: AcceptPlan, *, commit: bool = True, branch: Optional[str] = None,
           run_hooks: Optional[bool] = None) -> AcceptResult:
    """Write the plan's files; with ``commit``, commit exactly them (the user's index stays as is).

    ``run_hooks``: run the repository's pre-commit and commit-msg hooks (None: ``hooks_setting``);
    a failing hook refuses the commit with its output and removes the written files again."""
    preflight(plan, commit=commit, branch=branch)
    hooks = hooks_setting(run_hooks, plan.repo_root) if commit else False
    paths = sorted(plan.files)
    written = write_files(plan.files)
    if not commit:
        return AcceptResult(sha=None, message=plan.commit_message, paths=paths)
    repo = _repo(plan, plan.repo_root or paths[0].parent)
    try:
        names = [git_ops.rel(repo, path) for path in paths]
        blobs = git_ops.store_blobs(repo, names)
        sha = git_ops.commit_paths(repo, blobs, plan.commit_message, branch=branch, run_hooks=hooks)
    except git_ops.HookFailed as failed:
        written.rollback()
        raise UserInputError(f"{failed}\n(nothing was committed or written; fix what the hook "
                             "reports, or accept with --no-run-hooks)") from None
    except git_ops.git_errors() as err:
        written.rollback()
        raise UserInputError(f"{git_ops.one_line(err)} (nothing was committed or written)") from None
    message = str(repo.commit(sha).message) if hooks else plan.commit_message  # commit-msg may edit it
    return AcceptResult(sha=sha, message=message, paths=paths, branch=branch)
