"""``kevin bench PATH [...]``: the Kevin/KernelBench table for a model, on the real evaluator.

Plays one stored run per task of a KernelBench-format folder (or task files) with the run settings
of ``kevin optimize``, or re-judges recorded replies (``--replies FILE.jsonl``) without a model.
Prints the table, writes ``result.json`` and ``report.html`` (plots) under ``.kevin/bench/ID/`` (or
``--out``). ``kevin bench compare A B`` puts two results side by side. Ctrl-C cancels; the
benchmark resumes with ``--resume ID``.

Exit codes: 0 every task played, 130 cancelled, 2 bad input, 3 the machine lacks something
(GPU, nvcc), 1 (or the failing run's own code) when a run failed and stopped the benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kevin_agent.commands.optimize_cmd import BACKEND_FLAGS, add_run_arguments, eval_flags

EXIT_CANCELLED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit codes: 0 done, 1 a run failed (resumable), 2 bad input, 3 missing GPU/nvcc, "
                     "130 cancelled. The model server's key comes from KEVIN_API_KEY or OPENAI_API_KEY.")
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
    parser.add_argument("--resume", default=None, metavar="BENCH", help="continue a benchmark ('latest' works)")
    parser.add_argument("--out", default=None, metavar="DIR", help="where result.json and report.html go")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")


def _run_settings(args: argparse.Namespace) -> dict[str, Any]:
    flags = {field: getattr(args, attr, None) for attr, field in BACKEND_FLAGS.items()}
    if args.script:
        flags["script"] = str(Path(args.script).expanduser().resolve())
    return {"trajectories": args.trajectories or 4, "turns": args.turns or 4, "target_speedup": args.target_speedup,
            "beam_keep": args.beam, "beam_every": args.beam_every or 1, "backend_flags": flags,
            "eval_flags": eval_flags(args), "evaluator": args.evaluator, "gpu_name": args.gpu}


def _new_manifest(args: argparse.Namespace, manifests: Any) -> Any:
    from kevin_agent.benchmark import replies as recorded
    from kevin_agent.benchmark.manifest import Manifest, PlannedTask, new_bench_id
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


def _play(service: Any, manifest: Any, manifests: Any) -> Any:
    """Play on a thread so Ctrl-C reaches us: the first cancels (finished work kept), a second quits."""
    from rich.console import Console

    from kevin_agent.benchmark.runner import play_benchmark
    from kevin_agent.commands.interrupts import play_interruptible
    from kevin_agent.progress import make_progress

    console = Console(file=sys.stderr)
    live = make_progress(console) if console.is_terminal else None  # a live view of each task's run
    resume = f"kevin bench --resume {manifest.bench_id}"

    def say(line: str) -> None:
        print(f"kevin bench: {line}", file=sys.stderr, flush=True)

    with live if live is not None else contextlib.nullcontext():
        return play_interruptible(
            lambda cancel: play_benchmark(service, manifest, manifests, say, cancel, live or _ignore),
            threading.Event(), name="kevin-bench",
            on_cancel=lambda: say(f"cancelling; finished work is kept (Ctrl-C again to quit now; {resume})"),
            on_quit=lambda: say(f"stopped; resume with `{resume}`"))


def _ignore(event: object) -> None:
    """No live view when stderr is not a terminal: the per-task lines say enough."""


def _load_result(spec: str, manifests: Any) -> dict[str, Any]:
    from kevin_agent.errors import UserInputError

    path = Path(spec)
    if not path.is_file():
        path = manifests.folder / manifests.resolve(spec) / "result.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
    except (OSError, ValueError) as err:
        raise UserInputError(f"{spec}: no benchmark result readable at {path} ({err})") from None


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
    from kevin_agent.benchmark.runner import results_of
    from kevin_agent.progress import stdout_console

    results = results_of(service, manifest)
    result = result_dict(manifest.bench_id, manifest.run, results, summaries(results), manifest.replies)
    json_path, html_path = _write_outputs(result, Path(args.out) if args.out else
                                          manifests.folder / manifest.bench_id)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        stdout_console().print(table(result))
    print(f"kevin bench: wrote {json_path} and {html_path}", file=sys.stderr)
    for line in outcome.skipped:
        print(f"kevin bench: skipped {line}", file=sys.stderr)
    resume = f"kevin bench --resume {manifest.bench_id}"
    if outcome.cancelled:
        print(f"kevin bench: cancelled; resume with: {resume}", file=sys.stderr)
        return EXIT_CANCELLED
    if outcome.stopped is not None:
        print(f"kevin bench: stopped: {outcome.stopped} (resume with: {resume})", file=sys.stderr)
        return int(getattr(outcome.stopped, "exit_code", 1) or 1)
    return 0


def run(args: argparse.Namespace) -> int:
    from kevin_agent.benchmark.manifest import ManifestStore
    from kevin_agent.benchmark.report import comparison
    from kevin_agent.benchmark.runner import kevin_dir_of
    from kevin_agent.errors import UserInputError
    from kevin_agent.progress import stdout_console
    from kevin_agent.runs.service import RunService

    with RunService() as service:
        manifests = ManifestStore(kevin_dir_of(service))
        if args.paths[:1] == ["compare"]:
            if len(args.paths) != 3:
                raise UserInputError("usage: kevin bench compare A B (bench ids or result.json files)")
            first, second = (_load_result(spec, manifests) for spec in args.paths[1:])
            stdout_console().print(comparison(first, second))
            return 0
        manifest = manifests.load(args.resume) if args.resume else _new_manifest(args, manifests)
        started = time.monotonic()
        outcome = _play(service, manifest, manifests)
        code = _finish(args, service, manifest, manifests, outcome)
        print(f"kevin bench: {manifest.bench_id} took {time.monotonic() - started:.0f} s", file=sys.stderr)
        return code
