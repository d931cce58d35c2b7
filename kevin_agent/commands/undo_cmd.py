"""``kevin undo``: revert the latest kevin-agent commit with a new revert commit."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, default=None, metavar="DIR",
                        help="the repository (default: the one holding the current directory)")
    parser.add_argument("--run-hooks", action=argparse.BooleanOptionalAction, default=None,
                        help="run the repository's pre-commit and commit-msg hooks on the revert "
                             "commit (default: off, or [tool.kevin] run_hooks)")


def run(args: argparse.Namespace) -> int:
    from kevin_agent.accept import undo_last
    from kevin_agent.accept.git_ops import open_repo, work_tree

    repo = open_repo(args.repo or Path.cwd())
    sha = undo_last(work_tree(repo), run_hooks=args.run_hooks)
    summary = repo.commit(sha).summary  # str, or bytes for a message git could not decode
    print(f"{sha[:10]} {summary if isinstance(summary, str) else summary.decode(errors='replace')}")
    return 0
