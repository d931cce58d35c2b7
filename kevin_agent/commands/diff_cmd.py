"""``kevin diff RUN [CANDIDATE]``: the unified diff of what ``kevin accept`` would write."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run id (or a unique prefix), or 'latest'")
    parser.add_argument("candidate", nargs="?", metavar="CANDIDATE",
                        help="a candidate id such as t1.3 (trajectory 1, turn 3); default: the run's best")
    parser.add_argument("--target-dir", type=Path, metavar="DIR",
                        help="where the files would go (default: next to the module)")
    parser.add_argument("--force", action="store_true",
                        help="show it for a candidate the evaluator does not trust (as `kevin accept --force`)")


def run(args: argparse.Namespace) -> int:
    from kevin_agent.accept import plan_accept
    from kevin_agent.store import load_stored_run

    record = load_stored_run(args.run)
    plan = plan_accept(record, args.candidate, target_dir=args.target_dir, force=args.force)
    text = plan.diff(color=sys.stdout.isatty())
    if not text:
        print("nothing to change: the files are already there with this content", file=sys.stderr)
    sys.stdout.write(text)
    return 0
