"""``kevin show RUN [CANDIDATE]``: a stored run's candidates, or one candidate in full."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kevin_agent.run_record import RunRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="a run id (or a unique prefix), or 'latest'")
    parser.add_argument("candidate", nargs="?", metavar="CANDIDATE",
                        help="a candidate id such as t0.2 (trajectory 0, turn 2)")
    parser.add_argument("--reasoning", action="store_true",
                        help="with CANDIDATE: also print the model's full response and reasoning")


def _shape(settings: dict[str, Any]) -> str:
    """"2 trajectories x 1 turn" (or what is known of it)."""
    from kevin_agent.run_table import plural

    counts = [plural(settings[key], word) for key, word in (("trajectories", "trajectory"), ("turns", "turn"))
              if isinstance(settings.get(key), int)]
    return " x ".join(counts) or "shape unknown"


def _backend(settings: dict[str, Any]) -> str:
    """"backend openai (cognition-ai/Kevin-32B)", or "backend scripted (replies.json)"."""
    backend = settings.get("backend") or {}
    name = backend.get("backend")
    detail = backend.get("script") if name == "scripted" else backend.get("model")
    return f"backend {name}" + (f" ({detail})" if detail else "")


def run(args: argparse.Namespace) -> int:
    from kevin_agent.progress import print_run_result, stdout_console
    from kevin_agent.store import load_stored_run
    from kevin_agent.verdict_text import render_verdict

    record = load_stored_run(args.run_id)
    if args.candidate is None:
        origin = record.task.origin
        where = f"{origin.path}::{origin.class_name}" if origin else record.task.class_name
        print(f"run {record.run_id}: {where}, {_shape(record.settings)}, "
              f"{_backend(record.settings)}, status {record.status}, created {record.created}")
        if record.error:
            print(f"error: {record.error}")
        if len(record.gpu_names()) > 1:
            print_by_gpu(stdout_console(), record)
        else:
            print_run_result(stdout_console(), record)
        return 0
    candidate, verdict = record.candidate(args.candidate)
    print(f"candidate {candidate.id} of run {record.run_id}: trajectory {candidate.trajectory}, "
          f"turn {candidate.turn}, {candidate.tokens} tokens, finish reason {candidate.finish_reason}")
    if verdict is None:
        print("verdict: not evaluated yet (the run was interrupted; `kevin optimize --resume "
              f"{record.run_id}` evaluates it)")
    else:
        print("verdict:")
        print(render_verdict(verdict).rstrip())
    from kevin_agent.safe_text import terminal_safe as safe  # the model wrote these: escapes spelled out

    print(f"summary:\n{safe(candidate.summary.strip()) or '(none)'}")
    if candidate.parse_error:
        print(f"format error: {safe(candidate.parse_error)}")
    print(f"code:\n{safe(candidate.code)}" if candidate.code else "code: (none)")
    if args.reasoning:
        print(f"reasoning:\n{safe(candidate.reasoning)}\nresponse:\n{safe(candidate.response)}")
    return 0


def print_by_gpu(console: Any, record: RunRecord) -> None:
    """A run measured on several GPU models (a cluster): one table and best kernel per model, as
    speedups are compared only between verdicts of the same model; then the conclusion."""
    from kevin_agent.progress import candidates_table
    from kevin_agent.run_table import candidate_row, conclude

    best = record.best_by_gpu()
    for name in [*record.gpu_names(), None]:
        pairs = [(c, v) for c, v in record.candidates if (v.details.environment.gpu_name if v else None) == name]
        if not pairs:
            continue
        where = f"on {name}" if name else "not run on a GPU"
        console.print(candidates_table([candidate_row(c, v) for c, v in pairs],
                                       f"run {record.run_id} ({record.status}), {where}"))
        if name in best:
            candidate, verdict = best[name]
            console.print(f"Best on {name}: {candidate.id}, {verdict.speedup:.2f}x vs eager.",
                          highlight=False, markup=False)
    console.print(conclude(record).text, highlight=False, markup=False)
    for note in record.notes:
        console.print(f"Note: {note}.", highlight=False, markup=False)
