"""``kevin export RUN --format rl``: one JSON line per turn sample with Kevin's rewards.

A verdict the evaluator does not trust scores 0 (not correct); its sample's ``flags`` lists the
checks that fired."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="a run id (or a unique prefix), or 'latest'")
    parser.add_argument("--format", choices=("rl",), required=True,
                        help="rl: prompt, response, score, discounted return, GRPO advantage, flags "
                             "(trust checks that fired: such a sample scores 0)")
    parser.add_argument("--gamma", type=float, default=0.4, help="discount (default 0.4, Kevin's)")
    parser.add_argument("--aggregate", choices=("sum", "max"), default="sum",
                        help="sum (default) or max of the discounted future scores")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="write here (default: stdout)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kevin_agent.export import export_rl
    from kevin_agent.store import RunStore

    with RunStore.for_path(Path.cwd()) as store:
        record = store.load_run(args.run_id)
        messages = store.load_messages(record.run_id)
    out = Path(args.output) if args.output else None
    samples, text = export_rl(record, messages, out, args.gamma, args.aggregate)
    if out is None:
        sys.stdout.write(text)
    else:
        print(f"wrote {len(samples)} samples of run {record.run_id} to {out}", file=sys.stderr)
    return 0
