"""``kevin report RUN [-o DIR]``: PNG + self-contained HTML of a run's speedup per turn."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="a run id (or a unique prefix), or 'latest'")
    parser.add_argument("-o", "--output", default=None, metavar="DIR",
                        help="folder for RUN.png and RUN.html (default .kevin/reports/)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kevin_agent.errors import UserInputError
    from kevin_agent.report import write_report
    from kevin_agent.store import RunStore

    with RunStore.for_path(Path.cwd()) as store:
        record = store.load_run(args.run_id)
    out_dir = Path(args.output) if args.output else store.path.parent / "reports"
    if out_dir.exists() and not out_dir.is_dir():
        raise UserInputError(f"-o {out_dir}: exists and is not a folder")
    try:
        files = write_report(record, out_dir)
    except OSError as err:
        raise UserInputError(f"cannot write the report into {out_dir}: {err.strerror or err}") from None
    print(f"wrote {files.png}")
    print(f"wrote {files.html}")
    return 0
