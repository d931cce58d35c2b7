"""Start a program or a Python module already confined.

``python -m kevin_agent.evaluate.sandbox.launch --mode auto --policy JSON -m MODULE [ARGS]``
confines this fresh, single-threaded interpreter (so the rules bind every thread torch starts
later) and runs MODULE as ``__main__``; ``... --policy JSON -- PROGRAM [ARGS]`` confines, then
executes PROGRAM (the rules survive execve). In ``required`` mode a failure exits with status
``EXIT_UNCONFINED`` and one line on stderr, before any of the target runs. The report of the
layer is then ``sandbox.current_report()`` inside MODULE.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence
from typing import Optional

from kevin_agent.evaluate.sandbox.enforce import MODES, SandboxUnavailable, confine
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy

EXIT_UNCONFINED = 70


def launch_command(policy: SandboxPolicy, argv: Sequence[str], mode: str = "auto", *,
                   python: Optional[str] = None, module: bool = False) -> list[str]:
    """The command line that confines to ``policy`` then runs ``argv``: a module name and its
    arguments when ``module`` (run with this interpreter), else a program and its arguments."""
    head = [python or sys.executable, "-m", "kevin_agent.evaluate.sandbox.launch", "--mode", mode,
            "--policy", policy.to_json()]
    return head + (["-m", *argv] if module else ["--", *argv])


def _split(argv: Sequence[str]) -> tuple[list[str], Optional[str], list[str]]:
    """(launcher options, module or None, the target's arguments): everything after ``-m MODULE``
    or ``--`` belongs to the target, untouched."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return list(argv[:i]), None, list(argv[i + 1:])
        if arg == "-m" and i + 1 < len(argv):
            return list(argv[:i]), argv[i + 1], list(argv[i + 2:])
    return list(argv), None, []


def main(argv: Optional[Sequence[str]] = None) -> int:
    options, module, rest = _split(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="kevin_agent.evaluate.sandbox.launch",
                                     usage="%(prog)s [--mode MODE] --policy JSON (-m MODULE | -- PROGRAM) [ARGS]")
    parser.add_argument("--mode", choices=MODES, default="auto")
    parser.add_argument("--policy", required=True, help="SandboxPolicy as JSON")
    args = parser.parse_args(options)
    if not module and not rest:
        parser.error("give -m MODULE or -- PROGRAM")
    try:
        report = confine(SandboxPolicy.from_json(args.policy), args.mode)
    except SandboxUnavailable as exc:
        print(f"kevin-sandbox: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNCONFINED
    if os.environ.get("KEVIN_SANDBOX_VERBOSE"):
        print(f"kevin-sandbox: {report.details_line()}", file=sys.stderr, flush=True)
    if module:
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    try:
        os.execvp(rest[0], rest)
    except OSError as exc:
        print(f"kevin-sandbox: cannot run {rest[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
