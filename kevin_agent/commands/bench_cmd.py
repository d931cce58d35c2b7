"""``kevin bench PATH [...]``: the Kevin/KernelBench table for a model, on the real evaluator.

Plays one stored run per task of a KernelBench-format folder (or task files) with the run settings
of ``kevin optimize``, or re-judges recorded replies (``--replies FILE.jsonl``) without a model.
Prints the table, writes ``result.json`` and ``report.html`` (plots) under ``.kevin/bench/ID/`` (or
``--out``). ``kevin bench compare A B`` puts two results side by side. Ctrl-C cancels; the
benchmark resumes with ``--resume ID``.

Tasks play ``--parallel`` at a time against one evaluator, so their candidates are judged as
one stream (see ``benchmark.runner``). A task file that cannot be loaded is skipped and shown
apart, never counted.

Exit codes: 0 every task played (skipped ones apart), 130 cancelled, 2 bad input (a bad flag or
``--script``; or every task was skipped, so nothing ran), 3 the machine lacks something (GPU,
nvcc), 1 (or the failing run's own code) when a run failed and stopped the benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kevin_agent.commands.optimize_cmd import BACKEND_FLAGS, add_run_arguments, eval_flags

EXIT_CANCELLED = 130
EXIT_NOTHING_RAN = 2  # every task was skipped: the input held no task that could be loaded


def default_parallel() -> int:
    """Tasks played at once: enough for their builds to keep every core busy, at most 16."""
    return max(2, min(16, os.cpu_count() or 2))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit codes: 0 done, 1 a run failed (resumable), 2 bad input (or every task skipped), "
                     "3 missing GPU/nvcc, 130 cancelled. The model server's key comes from KEVIN_API_KEY or "
                     "OPENAI_API_KEY.")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="a KernelBench-format folder (level1/, level2/ ... of task files) or task "
                             "files; `compare A B` compares two results (bench ids or result.json files)")
    parser.add_argument("--levels", default=None, metavar="1,2", help="only these levels")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="at most N tasks per level")
    parser.add_argument("--tasks", default=None, metavar="GLOB",
                        help="only tasks whose name (level1/3_Matmul) or file name matches")
    parser.add_argument("--replies", default=None, metavar="FILE.jsonl",
                        help='re-judge recorded model output, no model: lines {"task": PATH, "reply": '
                             'TEXT} or {"task": PATH, "candidate": FILE}')
    add_run_arguments(parser)
    parser.add_argument("--parallel", type=_at_least_one, default=None, metavar="N",
                        help="tasks played at once, their candidates judged by one evaluator "
                             "(default: the CPU cores, 2 to 16)")
    parser.add_argument("--resume", default=None, metavar="BENCH", help="continue a benchmark ('latest' works)")
    parser.add_argument("--out", default=None, metavar="DIR", help="where result.json and report.html go")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")


def _at_least_one(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tasks above 0")
    return number


def _run_settings(args: argparse.Namespace) -> dict[str, Any]:
    flags = {field: getattr(args, attr, None) for attr, field in BACKEND_FLAGS.items()}
    if args.script:
        flags["script"] = str(Path(args.script).expanduser().resolve())
    return {"trajectories": args.trajectories or 4, "turns": args.turns or 4, "target_speedup": args.target_speedup,
            "beam_keep": args.beam, "beam_every": args.beam_every or 1, "backend_flags": flags,
            "eval_flags": eval_flags(args), "evaluator": args.evaluator, "gpu_name": args.gpu}


def _new_manifest(args: argparse.Namespace, manifests: Any, service: Any) -> Any:
    from kevin_agent.benchmark import replies as recorded
    from kevin_agent.benchmark.manifest import Manifest, PlannedTask, new_bench_id
    from kevin_agent.benchmark.runner import check_settings
    from kevin_agent.benchmark.tasks import BenchTask, find_tasks, level_of, parse_levels
    from kevin_agent.errors import UserInputError
    from kevin_agent.store import now_iso

    bench_id, settings = new_bench_id(), _run_settings(args)
    if args.replies:
        if args.paths:
            raise UserInputError("give task paths or --replies FILE.jsonl (its lines name the tasks), not both")
        grouped = recorded.by_task(recorded.read_replies(Path(args.replies)))
        tasks = [BenchTask(path, level_of(path)) for path in grouped]
        settings.update(trajectories=max(len(t) for t in grouped.values()), turns=1)
    else:
        if not args.paths:
            raise UserInputError("name a KernelBench folder or task files: kevin bench PATH (or --resume BENCH)")
        tasks = find_tasks(args.paths, parse_levels(args.levels), args.limit, args.tasks)
    check_settings(service, settings, args.script)
    manifest = Manifest(bench_id, now_iso(), [str(Path(p).resolve()) for p in args.paths], settings,
                        replies=str(Path(args.replies).resolve()) if args.replies else None)
    for number, task in enumerate(tasks):
        planned = PlannedTask(task.name, task.level, str(task.path))
        if args.replies:
            planned.script = str(manifests.folder / bench_id / "scripts" / f"{number:04d}.json")
            planned.trajectories = len(grouped[task.path])
            recorded.write_script(grouped[task.path], Path(planned.script))
        manifest.tasks.append(planned)
    manifests.save(manifest)
    return manifest


def _play(service: Any, manifest: Any, manifests: Any, parallel: int) -> Any:
    """Play on a thread so Ctrl-C reaches us: the first cancels (finished work kept), a second quits."""
    from rich.console import Console

    from kevin_agent.benchmark.runner import play_benchmark
    from kevin_agent.commands.interrupts import play_interruptible
    from kevin_agent.progress import make_progress

    console = Console(file=sys.stderr)
    # a live view of one run at a time; tasks side by side print their lines only
    live = make_progress(console) if console.is_terminal and parallel == 1 else None
    resume = f"kevin bench --resume {manifest.bench_id}"

    def say(line: str) -> None:
        print(f"kevin bench: {line}", file=sys.stderr, flush=True)

    say(f"{manifest.bench_id}: {len(manifest.tasks)} tasks, up to {min(parallel, len(manifest.tasks))} at once")
    with live if live is not None else contextlib.nullcontext():
        return play_interruptible(
            lambda cancel: play_benchmark(service, manifest, manifests, say, cancel, live or _ignore, parallel),
            threading.Event(), name="kevin-bench",
            on_cancel=lambda: say(f"cancelling; finished work is kept (Ctrl-C again to quit now; {resume})"),
            on_quit=lambda: say(f"stopped; resume with `{resume}`"))


def _ignore(event: object) -> None:
    """No live view when stderr is not a terminal: the per-task lines say enough."""


def _read_json(spec: str, path: Path) -> dict[str, Any]:
    from kevin_agent.errors import UserInputError

    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserInputError(f"{spec}: no benchmark result readable at {path} ({err})") from None
    if not isinstance(loaded, dict):
        raise UserInputError(f"{spec}: {path} is not a benchmark result")
    return loaded


def _load_result(spec: str, manifests: Any, service: Any) -> dict[str, Any]:
    """A result to compare: a result.json, a bench id, or a benchmark's plan (``.kevin/bench/ID.json``,
    all a benchmark that never finished leaves): then the figures of its runs stored so far."""
    from kevin_agent.benchmark.manifest import Manifest
    from kevin_agent.errors import UserInputError

    path = Path(spec)
    if not path.is_file():
        bench_id = manifests.resolve(spec)
        path = manifests.folder / bench_id / "result.json"
        if not path.is_file():
            return _plan_result(manifests.load(bench_id), service)
    loaded = _read_json(spec, path)
    if isinstance(loaded.get("summaries"), list):
        return loaded
    try:
        return _plan_result(Manifest.from_dict(loaded), service)
    except (KeyError, TypeError, ValueError):
        raise UserInputError(f"{spec}: {path} is neither a benchmark result nor a benchmark plan") from None


def _plan_result(manifest: Any, service: Any) -> dict[str, Any]:
    """The result of a benchmark with no result.json, from its stored runs; a ``note`` says what
    it holds (nothing, when no task ran)."""
    from kevin_agent.benchmark.metrics import summaries
    from kevin_agent.benchmark.report import result_dict
    from kevin_agent.benchmark.runner import results_of, skipped_of

    results = results_of(service, manifest)
    ran = sum(r.status != "missing" for r in results)
    if not ran:
        results = []
    result = result_dict(manifest.bench_id, manifest.run, results, summaries(results) if results else [],
                         manifest.replies, skipped_of(manifest))
    result["note"] = (f"unfinished: {ran} of {len(results)} tasks ran, figures of the runs stored so far" if ran
                      else "never started: no task ran, nothing to compare")
    return result


def _write_outputs(result: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    from kevin_agent.atomic import write_text_atomically
    from kevin_agent.benchmark.report import html_report

    folder.mkdir(parents=True, exist_ok=True)
    json_path, html_path = folder / "result.json", folder / "report.html"
    write_text_atomically(json_path, json.dumps(result, indent=2))
    write_text_atomically(html_path, html_report(result))
    return json_path, html_path


def _finish(args: argparse.Namespace, service: Any, manifest: Any, manifests: Any, outcome: Any) -> int:
    from kevin_agent.benchmark.metrics import summaries
    from kevin_agent.benchmark.report import result_dict, table
    from kevin_agent.benchmark.runner import results_of, skipped_of
    from kevin_agent.progress import stdout_console

    results, skipped = results_of(service, manifest), skipped_of(manifest)
    resume = f"kevin bench --resume {manifest.bench_id}"
    if not results and skipped and outcome.stopped is None:
        print(f"kevin bench: no task ran: all {len(skipped)} tasks were skipped (each line above says why); "
              "nothing was scored", file=sys.stderr)
        return EXIT_NOTHING_RAN
    result = result_dict(manifest.bench_id, manifest.run, results, summaries(results), manifest.replies, skipped)
    json_path, html_path = _write_outputs(result, Path(args.out) if args.out else
                                          manifests.folder / manifest.bench_id)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        stdout_console().print(table(result))
    print(f"kevin bench: wrote {json_path} and {html_path}", file=sys.stderr)
    if skipped:
        print(f"kevin bench: {len(skipped)} of {len(manifest.tasks)} tasks skipped, not counted "
              f"(listed in {json_path.name})", file=sys.stderr)
    if outcome.cancelled:
        print(f"kevin bench: cancelled; resume with: {resume}", file=sys.stderr)
        return EXIT_CANCELLED
    if outcome.stopped is not None:
        print(f"kevin bench: stopped: {outcome.stopped} (resume with: {resume})", file=sys.stderr)
        return int(getattr(outcome.stopped, "exit_code", 1) or 1)
    return 0


def run(args: argparse.Namespace) -> int:
    from kevin_agent.runs.service import RunService

    with RunService() as service:
        return bench(args, service)


def bench(args: argparse.Namespace, service: Any) -> int:
    """``kevin bench`` on a given run service (tests hand in one with a stand-in evaluator)."""
    from kevin_agent.benchmark.manifest import ManifestStore
    from kevin_agent.benchmark.report import comparison
    from kevin_agent.benchmark.runner import kevin_dir_of
    from kevin_agent.errors import UserInputError
    from kevin_agent.progress import stdout_console

    manifests = ManifestStore(kevin_dir_of(service))
    if args.paths[:1] == ["compare"]:
        if len(args.paths) != 3:
            raise UserInputError("usage: kevin bench compare A B (bench ids, result.json or plan files)")
        first, second = (_load_result(spec, manifests, service) for spec in args.paths[1:])
        stdout_console().print(comparison(first, second))
        return 0
    manifest = manifests.load(args.resume) if args.resume else _new_manifest(args, manifests, service)
    started = time.monotonic()
    outcome = _play(service, manifest, manifests, args.parallel or default_parallel())
    code = _finish(args, service, manifest, manifests, outcome)
    print(f"kevin bench: {manifest.bench_id} took {time.monotonic() - started:.0f} s", file=sys.stderr)
    return code
