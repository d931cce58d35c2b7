"""``undo_last``: revert the latest kevin-agent commit with a new commit (never a reset)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from kevin_agent.accept import git_ops
from kevin_agent.accept.message import CANDIDATE_TRAILER, REVERT_TRAILER, RUN_TRAILER, trailers
from kevin_agent.errors import UserInputError

if TYPE_CHECKING:
    import git

SEARCH_DEPTH = 1000  # commits looked through for a kevin-agent commit


def latest_kevin_commit(repo: git.Repo) -> Optional[git.Commit]:
    """The newest commit on HEAD with a Kevin-Run trailer that has not been reverted already."""
    if not repo.head.is_valid():
        return None
    reverted: set[str] = set()
    for commit in repo.iter_commits("HEAD", max_count=SEARCH_DEPTH):
        found = trailers(str(commit.message))
        if REVERT_TRAILER in found:
            reverted.add(found[REVERT_TRAILER])
        elif RUN_TRAILER in found and commit.hexsha not in reverted:
            return commit
    return None


def _changed_paths(repo: git.Repo, commit: git.Commit) -> list[str]:
    parent = commit.parents[0].hexsha if commit.parents else None
    args = [parent, commit.hexsha] if parent else ["--root", commit.hexsha]
    out = repo.git.diff_tree("-r", "--no-commit-id", "--name-only", *args)
    return [line for line in out.splitlines() if line.strip()]


def _check_untouched(repo: git.Repo, commit: git.Commit, paths: list[str]) -> None:
    later = repo.git.diff("--name-only", commit.hexsha, "HEAD", "--", *paths).split()
    if later:
        raise UserInputError(f"{later[0]} changed in a later commit since {commit.hexsha[:10]}: "
                             f"revert it by hand if you still want to")
    dirty = repo.git.status("--porcelain", "--untracked-files=all", "--", *paths).splitlines()
    if dirty:
        raise UserInputError(f"{dirty[0][3:]} has uncommitted changes: commit or discard them before undo")


def _revert_message(commit: git.Commit) -> str:
    found = trailers(str(commit.message))
    subject = str(commit.message).splitlines()[0]
    origin = f"run {found.get(RUN_TRAILER, '?')}, candidate {found.get(CANDIDATE_TRAILER, '?')}"
    return (f'Revert "{subject}"\n\nThis reverts commit {commit.hexsha}, written by kevin-agent '
            f"({origin}).\n\n{REVERT_TRAILER}: {commit.hexsha}\n")


def _restore_worktree(repo: git.Repo, entries: dict[str, Optional[str]]) -> None:
    root = git_ops.work_tree(repo)
    for path, blob in entries.items():
        target = root / path
        if blob is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(repo.odb.stream(bytes.fromhex(blob)).read())


def undo_target(repo_root: Path) -> tuple[str, str]:
    """(sha, subject) of the commit ``undo_last`` would revert (to ask before reverting it);
    UserInputError when there is none."""
    repo = git_ops.open_repo(Path(repo_root))
    try:
        commit = latest_kevin_commit(repo)
    except git_ops.git_errors() as err:
        raise UserInputError(git_ops.one_line(err)) from None
    if commit is None:
        raise UserInputError("no kevin-agent commit to undo on this branch")
    return commit.hexsha, str(commit.message).splitlines()[0]


def undo_last(repo_root: Path, expected: Optional[str] = None, run_hooks: Optional[bool] = None) -> str:
    """Revert the latest kevin-agent commit; the sha of the revert commit. Refuses if its files
    changed, or when ``expected`` is given and the latest kevin-agent commit is another one.
    ``run_hooks`` as for ``accept`` (None: ``[tool.kevin] run_hooks``, default off)."""
    from kevin_agent.accept.apply import hooks_setting

    hooks = hooks_setting(run_hooks, Path(repo_root))
    repo = git_ops.open_repo(Path(repo_root))
    try:
        busy = git_ops.operation_in_progress(repo)
        if busy:
            raise UserInputError(f"{busy} is in progress: finish or abort it before undo")
        if repo.head.is_detached:
            raise UserInputError("HEAD is detached: switch to the branch holding the kevin-agent commit")
        commit = latest_kevin_commit(repo)
        if commit is None:
            raise UserInputError("no kevin-agent commit to undo on this branch")
        if expected is not None and commit.hexsha != expected:
            raise UserInputError(f"the latest kevin-agent commit is now {commit.hexsha[:10]}, not "
                                 f"{expected[:10]}: nothing was reverted")
        paths = _changed_paths(repo, commit)
        _check_untouched(repo, commit, paths)
        parent = commit.parents[0].hexsha if commit.parents else None
        entries = {path: git_ops.tree_blob(repo, parent, path) for path in paths}
        if hooks:  # the hooks see the files as the revert restores them
            _restore_worktree(repo, entries)
        try:
            sha = git_ops.commit_paths(repo, entries, _revert_message(commit), run_hooks=hooks)
        except git_ops.HookFailed as failed:
            _restore_worktree(repo, {path: git_ops.tree_blob(repo, commit.hexsha, path) for path in paths})
            raise UserInputError(f"{failed}\n(nothing was reverted)") from None
        _restore_worktree(repo, entries)
    except git_ops.git_errors() as err:
        raise UserInputError(git_ops.one_line(err)) from None
    return sha
