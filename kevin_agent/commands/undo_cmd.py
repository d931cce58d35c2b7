"""``kevin undo``: revert the latest kevin-agent commit with a new revert commit."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, default=None, metavar="DIR",
                        help="the repository (default: the one holding the current directory)")


def run(args: argparse.Namespace) -> int:
    from kevin_agent.accept import undo_last
    from kevin_agent.accept.git_ops import open_repo

    repo = open_repo(args.repo or Path.cwd())
    sha = undo_last(Path(repo.working_tree_dir))
    print(f"{sha[:10]} {repo.commit(sha).summary}")
    return 0
