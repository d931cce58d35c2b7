"""``kevin tui [PATH]``: the terminal UI (browse modules, run, review, accept, undo)."""

from __future__ import annotations

import argparse

from kevin_agent.errors import EnvironmentProblem, UserInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=None, metavar="PATH",
                        help="folder or .py file to browse for nn.Module classes "
                             "(default: the repository root)")
    parser.add_argument("--evaluator", default=None, metavar="SPEC",
                        help="'cuda' (default) or 'replay:FILE' (recorded verdicts, no GPU)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    path = None
    if args.path is not None:
        path = Path(args.path).expanduser()
        if not path.exists():
            raise UserInputError(f"{args.path}: no such file or folder")
    try:
        from kevin_agent.tui.app import create_app
    except ImportError as err:
        raise EnvironmentProblem(f"the terminal UI needs textual: {err}") from None

    create_app(path, evaluator_spec=args.evaluator).run()
    return 0
