"""``kevin runs``: list the runs stored in this repository's ``.kevin/runs.sqlite``."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from rich.table import Table

    from kevin_agent.progress import stdout_console
    from kevin_agent.run_table import best_text
    from kevin_agent.store import RunStore

    with RunStore.for_path(Path.cwd()) as store:
        runs = store.list_runs()
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs stored in {store.path}; start one with `kevin optimize FILE.py::Class`")
        return 0
    table = Table(title=f"runs in {store.path}", title_justify="left")
    for name in ("run", "module", "created", "status", "candidates", "best vs eager"):
        table.add_column(name)
    for r in runs:
        module = f"{r.source_path}::{r.class_name}" if r.source_path else r.class_name
        table.add_row(r.run_id, module, r.created, r.status, str(r.candidates), best_text(r))
    stdout_console().print(table)
    return 0
