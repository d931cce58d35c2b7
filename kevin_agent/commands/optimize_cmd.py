"""``kevin optimize FILE.py::Class``: write and refine a CUDA kernel with the model.

Live progress on a terminal (plain lines otherwise) on stderr; the table of candidates and the
conclusion (or ``--json``) on stdout. Ctrl-C cancels, keeps finished work and prints the resume
command. Exit codes: 0 done, 130 cancelled, 1 (or the error's code) when the run failed.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="FILE.py::Class",
                        help="the nn.Module to optimize (FILE.py alone when it holds one module)")
    parser.add_argument("--trajectories", "-m", type=_positive_int, default=4,
                        help="parallel trajectories (default 4; Kevin's paper used 16)")
    parser.add_argument("--turns", "-n", type=_positive_int, default=4,
                        help="refinement turns per trajectory (default 4; Kevin's paper used 8)")
    parser.add_argument("--target-speedup", type=float, default=None, metavar="X",
                        help="stop early once a kernel reaches this speedup over eager")
    parser.add_argument("--beam", type=_positive_int, default=None, metavar="K",
                        help="beam mode: after each turn keep the K fastest trajectories, fork each")
    parser.add_argument("--beam-every", type=_positive_int, default=1, metavar="T",
                        help="turns between beam selections (default 1)")
    parser.add_argument("--backend", choices=("vllm", "openai", "scripted"), default=None)
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="OpenAI-compatible endpoint (default http://localhost:8000/v1)")
    parser.add_argument("--model", default=None, metavar="M")
    parser.add_argument("--script", default=None, metavar="FILE",
                        help="recorded responses for --backend scripted")
    parser.add_argument("--evaluator", default=None, metavar="SPEC",
                        help="'cuda' (default) or 'replay:FILE' (recorded verdicts, no GPU)")
    parser.add_argument("--max-tokens", type=_positive_int, default=None, metavar="N")
    parser.add_argument("--temperature", type=float, default=None, metavar="T")
    parser.add_argument("--gpu", default=None, metavar="NAME", help="GPU named in the prompt")
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary")
    parser.add_argument("--resume", default=None, metavar="RUN",
                        help="continue a stored run (RUN may be 'latest')")


def _run_in_thread(session: Any, cancel: threading.Event) -> Any:
    """Run the session off the main thread so Ctrl-C reaches us; re-raise its exceptions here."""
    outcome: dict[str, Any] = {}
    finished = threading.Event()  # not Thread.join: an interrupted join can return early

    def work() -> None:
        try:
            outcome["record"] = session.run(cancel)
        except BaseException as err:
            outcome["error"] = err
        finally:
            finished.set()

    threading.Thread(target=work, name="kevin-session", daemon=True).start()
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        cancel.set()
        print("kevin optimize: cancelling; finished work is kept (Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)
        while not finished.wait(0.2):
            pass
    if "error" in outcome:
        raise outcome["error"]
    return outcome["record"]


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from rich.console import Console

    from kevin_agent.optimize_setup import prepare
    from kevin_agent.progress import make_progress, print_run_result, stdout_console
    from kevin_agent.run_table import run_summary_dict
    from kevin_agent.store import RunStore

    store = RunStore.for_path(Path.cwd())
    err_console = Console(file=sys.stderr)
    progress = make_progress(err_console)
    prepared = prepare(args, store, progress)
    cancel = threading.Event()
    try:
        with progress:
            record = _run_in_thread(prepared.session, cancel)
    finally:
        close = getattr(prepared.evaluator, "close", None)
        if callable(close):
            close()
    resume_hint = f"kevin optimize --resume {record.run_id}"
    if args.json:
        summary = run_summary_dict(record)
        summary["resume_command"] = resume_hint if record.status != "done" else None
        print(json.dumps(summary, indent=2))
    else:
        print_run_result(stdout_console(), record)
    if record.status == "cancelled":
        print(f"kevin optimize: cancelled; resume with: {resume_hint}", file=sys.stderr)
        return 130
    if record.status == "failed":
        print(f"kevin optimize: {record.error} (run {record.run_id} kept; resume with: "
              f"{resume_hint})", file=sys.stderr)
        failure = prepared.session.failure
        return getattr(failure, "exit_code", 1) or 1
    return 0
