"""``kevin accept RUN [CANDIDATE] [--commit | --no-commit] [--branch NAME] [--run-hooks] [--force]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kevin_agent.errors import UserInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run id (or a unique prefix), or 'latest'")
    parser.add_argument("candidate", nargs="?", metavar="CANDIDATE",
                        help="a candidate id such as t1.3 (trajectory 1, turn 3); default: the run's best")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--commit", dest="commit", action="store_const", const=True, default=None,
                      help="write the files and commit exactly them (no question asked)")
    mode.add_argument("--no-commit", dest="commit", action="store_const", const=False,
                      help="write the files, commit nothing")
    parser.add_argument("--branch", metavar="NAME",
                        help="commit on a new branch NAME made at HEAD (needed on a detached HEAD)")
    parser.add_argument("--target-dir", type=Path, metavar="DIR",
                        help="where the files go (default: next to the module, or [tool.kevin] accept_dir)")
    parser.add_argument("--force", action="store_true",
                        help="accept a named candidate the evaluator does not trust (its commit message "
                             "says so); never a candidate that is not correct")
    parser.add_argument("--run-hooks", action=argparse.BooleanOptionalAction, default=None,
                        help="run the repository's pre-commit and commit-msg hooks on the commit; a "
                             "failing hook refuses it (default: off, or [tool.kevin] run_hooks)")


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _ask(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def run(args: argparse.Namespace) -> int:
    from kevin_agent.accept import accept, plan_accept, preflight
    from kevin_agent.store import load_stored_run

    record = load_stored_run(args.run)
    plan = plan_accept(record, args.candidate, target_dir=args.target_dir, force=args.force)
    commit = args.commit
    if commit is None:
        if not _interactive():
            raise UserInputError("nothing written: pass --commit to write and commit the kernel files, "
                                 "or --no-commit to only write them")
        preflight(plan, commit=True, branch=args.branch)
        sys.stdout.write(plan.diff(color=True))
        print("\n" + plan.commit_message)
        for note in plan.notes:
            print(f"note: {note}")
        if not _ask("Write these files and commit them? [y/N] "):
            print("nothing written")
            return 0
        commit = True
    result = accept(plan, commit=commit, branch=args.branch, run_hooks=args.run_hooks)
    for path in result.paths:
        print(f"wrote {plan.label(path)}")
    if result.sha:
        where = f" on new branch {result.branch}" if result.branch else ""
        print(f"committed {result.sha[:10]}{where}: {result.message.splitlines()[0]}")
        print("undo with `kevin undo`")
    else:
        print("not committed (--no-commit)")
    for note in plan.notes:
        print(f"note: {note}")
    return 0
