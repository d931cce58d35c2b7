"""Git plumbing through GitPython: commit exactly our paths, leaving the user's index alone.

A plain ``git commit`` would sweep in whatever the user has staged. Instead the commit's tree is
built in a temporary index (HEAD plus only our paths), written with commit-tree, HEAD's branch
moved with update-ref, and then only our paths' entries are updated in the real index.

commit-tree runs no hooks. With ``run_hooks`` the repository's pre-commit hook runs on the
temporary index (``GIT_INDEX_FILE``, as ``git commit PATHS`` does; what it stages there is
committed) and its commit-msg hook on the message file (its edits are kept); a hook that fails
stops the commit with its output (``HookFailed``). ``git hook run`` (git >= 2.36) finds the hooks
(core.hooksPath included); older git runs ``<git-path hooks>/<name>`` when it is executable.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from kevin_agent.errors import UserInputError

if TYPE_CHECKING:
    import git

_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or am",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
}
FILE_MODE = "100644"
COMMIT_HOOKS = ("pre-commit", "commit-msg")
HOOK_OUTPUT_LINES = 40  # of a failing hook's output, shown to the user


class HookFailed(Exception):
    """A commit hook exited non-zero: nothing was committed."""

    def __init__(self, hook: str, status: int, output: str) -> None:
        lines = output.strip().splitlines()
        shown = "\n".join(lines[-HOOK_OUTPUT_LINES:])
        super().__init__(f"the repository's {hook} hook failed (exit {status})" + (f":\n{shown}" if shown else ""))
        self.hook, self.status, self.output = hook, status, output


def git_errors() -> tuple[type[BaseException], ...]:
    """The narrow set of GitPython failures reported to the user as one line."""
    import git

    return (git.exc.GitCommandError, git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError,
            git.exc.BadName)


def one_line(err: BaseException) -> str:
    """A git failure as one readable line."""
    import git

    if isinstance(err, git.exc.GitCommandError):
        text = (err.stderr or err.stdout or "").strip().replace("\n", " ")
        text = text.removeprefix("stderr: ").strip("' ")
        return f"git {err.command[1] if len(err.command) > 1 else ''} failed: {text or err.status}"
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def open_repo(start: Path, *, hint: str = "") -> git.Repo:
    """The repository holding ``start``; UserInputError (with ``hint``) when there is none."""
    import git

    try:
        return git.Repo(start, search_parent_directories=True)
    except (git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError):
        raise UserInputError(f"{start} is not inside a git repository{hint}") from None


def work_tree(repo: git.Repo) -> Path:
    """The repository's working tree; UserInputError for a bare repository (nothing to edit)."""
    if repo.working_tree_dir is None:
        raise UserInputError(f"{repo.git_dir} is a bare repository: kevin needs a checkout")
    return Path(repo.working_tree_dir)


def blob_sha(data: bytes) -> str:
    """Git's object id of a blob with these bytes (SHA-1 repositories)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def rel(repo: git.Repo, path: Path) -> str:
    return Path(os.path.relpath(path.resolve(), work_tree(repo).resolve())).as_posix()


def head_sha(repo: git.Repo) -> Optional[str]:
    return repo.head.commit.hexsha if repo.head.is_valid() else None


def tree_blob(repo: git.Repo, commit: Optional[str], path: str) -> Optional[str]:
    """The blob id of ``path`` in ``commit``, None when absent."""
    if commit is None:
        return None
    out = repo.git.ls_tree(commit, "--", path)
    return out.split()[2] if out.strip() else None


def index_blob(repo: git.Repo, path: str) -> Optional[str]:
    out = repo.git.ls_files("-s", "--", path)
    return out.split()[1] if out.strip() else None


def operation_in_progress(repo: git.Repo) -> Optional[str]:
    git_dir = Path(repo.git_dir)
    for marker, what in _IN_PROGRESS.items():
        if (git_dir / marker).exists():
            return what
    return None


def check_branch_state(repo: git.Repo, branch: Optional[str]) -> None:
    """Refuse during a merge/rebase, on a detached HEAD without a branch, or on a taken branch name."""
    busy = operation_in_progress(repo)
    if busy:
        raise UserInputError(f"{busy} is in progress in {repo.working_tree_dir}: finish or abort it first")
    if branch is not None:
        try:
            repo.git.check_ref_format("--branch", branch)
        except git_errors():
            raise UserInputError(f"{branch!r} is not a valid branch name") from None
        if f"refs/heads/{branch}" in {ref.path for ref in repo.heads}:
            raise UserInputError(f"branch {branch!r} already exists: pick a new name for --branch")
    elif repo.head.is_detached:
        raise UserInputError(
            "HEAD is detached: switch to a branch first, or pass --branch NAME to commit on a new branch"
        )


def check_paths_committable(repo: git.Repo, files: dict[Path, str]) -> None:
    """Refuse paths with staged changes (other than exactly our content) and an all-done accept."""
    head = head_sha(repo)
    already = True
    for path, content in files.items():
        name = rel(repo, path)
        if name.startswith("../"):
            raise UserInputError(f"{path} is outside the repository {repo.working_tree_dir}")
        ours = blob_sha(content.encode("utf-8"))
        in_head = tree_blob(repo, head, name)
        staged = index_blob(repo, name)
        if staged is not None and staged != in_head and staged != ours:
            raise UserInputError(f"{name} has staged changes: commit or unstage them first (nothing was written)")
        already = already and in_head == ours
    if already:
        raise UserInputError(f"these files are already committed with this content at {head[:10] if head else 'HEAD'}")


def _git_env(index_file: str) -> dict[str, str]:
    return {"GIT_INDEX_FILE": index_file}


def _hook_command(repo: git.Repo, hook: str, args: list[str]) -> Optional[list[str]]:
    """How to run ``hook`` (None when the repository has none)."""
    if tuple(repo.git.version_info[:2]) >= (2, 36):
        return ["git", "hook", "run", "--ignore-missing", hook, "--", *args]
    folder = Path(repo.git.rev_parse("--git-path", "hooks"))
    path = folder if folder.is_absolute() else work_tree(repo) / folder
    path = path / hook
    return [str(path), *args] if path.is_file() and os.access(path, os.X_OK) else None


def run_hook(repo: git.Repo, hook: str, args: list[str], env: dict[str, str]) -> None:
    """Run one of the repository's hooks in its working tree; HookFailed when it exits non-zero."""
    command = _hook_command(repo, hook, args)
    if command is None:
        return
    done = subprocess.run(command, cwd=repo.working_tree_dir, env={**os.environ, **env},
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    if done.returncode != 0:
        raise HookFailed(hook, done.returncode, done.stdout)


def commit_paths(repo: git.Repo, entries: Mapping[str, Optional[str]], message: str,
                 branch: Optional[str] = None, run_hooks: bool = False) -> str:
    """Commit ``entries`` (repo-relative path -> blob id, None = delete) on top of HEAD.

    Only those paths change, in the commit and in the real index; the user's other staged and
    unstaged work is left exactly as it was. With ``branch``, the commit goes on a new branch made
    at HEAD and HEAD switches to it (same commit, so the working tree is untouched). With
    ``run_hooks``, the pre-commit and commit-msg hooks run first (module docstring); HookFailed
    leaves everything as it was.
    """
    parent = head_sha(repo)
    with tempfile.TemporaryDirectory(prefix="kevin-index-") as scratch:
        env = _git_env(os.path.join(scratch, "index"))
        if parent is not None:
            repo.git.read_tree(parent, env=env)
        _stage(repo, entries, env=env)
        message_file = os.path.join(scratch, "message")
        Path(message_file).write_text(message, encoding="utf-8")
        if run_hooks:
            run_hook(repo, "pre-commit", [], env)
            run_hook(repo, "commit-msg", [message_file], env)
            message = Path(message_file).read_text(encoding="utf-8")
        tree = repo.git.write_tree(env=env)
        parents = ["-p", parent] if parent else []
        sha = repo.git.commit_tree(tree, *parents, "-F", message_file)
    if run_hooks:  # the real index gets what was committed (a hook may have restaged our paths)
        entries = {path: tree_blob(repo, sha, path) for path in entries}
    subject = message.splitlines()[0]
    zero = "0" * 40
    if branch is not None:
        repo.git.update_ref("-m", f"kevin: branch for {subject}", f"refs/heads/{branch}", sha, zero)
        repo.git.symbolic_ref("-m", f"kevin: switch to {branch}", "HEAD", f"refs/heads/{branch}")
    else:
        repo.git.update_ref("-m", subject, "HEAD", sha, parent or zero)
    _stage(repo, entries, env=None)
    return sha


def _stage(repo: git.Repo, entries: Mapping[str, Optional[str]], env: Optional[dict[str, str]]) -> None:
    for path, blob in entries.items():
        if blob is None:
            repo.git.update_index("--force-remove", "--", path, env=env)
        else:
            repo.git.update_index("--add", "--cacheinfo", f"{FILE_MODE},{blob},{path}", env=env)


def store_blobs(repo: git.Repo, paths: list[str]) -> dict[str, str]:
    """Write the working-tree files into the object store (filters applied, like ``git add``)."""
    out = repo.git.hash_object("-w", "--", *paths)
    return dict(zip(paths, out.split()))
