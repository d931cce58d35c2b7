"""``kevin optimize FILE.py::Class``: write and refine a CUDA kernel with the model (several
classes: ``optimize_many``).

Live progress on a terminal (plain lines otherwise) on stderr; the table of candidates and the
conclusion (or ``--json``) on stdout. Ctrl-C cancels, keeps finished work and prints the resume
command. Exit codes: 0 done, 130 cancelled, 1 (or the error's code) when the run failed.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any, Optional

from kevin_agent.eval_modes import POLICIES, SANDBOX_MODES, choices_metavar


def add_evaluation_arguments(parser: argparse.ArgumentParser, cluster: bool = True) -> None:
    """--policy, --sandbox and (``cluster``) --cluster, shared with `kevin eval`. Their values are
    checked once, where settings are resolved (``config.resolve_eval_settings``): one line, exit 2."""
    parser.add_argument("--policy", default=None, metavar=choices_metavar(POLICIES),
                        help="what may run on the GPU: strict (only your own CUDA kernels, Kevin's "
                             "setting; the default) or partial (library and PyTorch kernels allowed "
                             "beside your own, KernelBench's rule)")
    parser.add_argument("--sandbox", default=None, metavar=choices_metavar(SANDBOX_MODES),
                        help="confine model-written code with the kernel's Landlock and seccomp: "
                             "auto (when available; the default), required, off")
    if cluster:
        parser.add_argument("--cluster", default=None, metavar="ADDRESS",
                            help="evaluate on a Ray cluster: 'auto' or ray://HEAD:10001 "
                                 "(needs `pip install 'kevin-agent[ray]'`)")


def eval_flags(args: argparse.Namespace) -> dict[str, object]:
    return {"policy": args.policy, "sandbox": args.sandbox, "cluster": args.cluster}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="*", metavar="FILE.py::Class",
                        help="the nn.Module to optimize (FILE.py alone when it holds one module); "
                             "several are played at once, one stored run each, through one evaluator")
    add_run_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary")
    parser.add_argument("--resume", default=None, metavar="RUN",
                        help="continue a stored run (RUN may be 'latest')")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The settings of a run (shape, backend, evaluation), shared with ``kevin bench``."""
    parser.add_argument("--trajectories", "-m", type=_positive_int, default=None,
                        help="parallel trajectories (default 4; Kevin's paper used 16)")
    parser.add_argument("--turns", "-n", type=_positive_int, default=None,
                        help="refinement turns per trajectory (default 4; Kevin's paper used 8)")
    parser.add_argument("--target-speedup", type=float, default=None, metavar="X",
                        help="stop early once a kernel reaches this speedup over eager")
    parser.add_argument("--beam", type=_positive_int, default=None, metavar="K",
                        help="beam mode: after each turn keep the K fastest trajectories, fork each")
    parser.add_argument("--beam-every", type=_positive_int, default=None, metavar="T",
                        help="turns between beam selections (default 1)")
    parser.add_argument("--backend", choices=("vllm", "openai", "scripted"), default=None,
                        help="where replies come from: openai (any OpenAI-compatible server, the "
                             "default), vllm (in-process vllm.LLM), scripted (recorded replies)")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="OpenAI-compatible endpoint (default http://localhost:8000/v1)")
    parser.add_argument("--model", default=None, metavar="NAME",
                        help="model name sent to the server (default cognition-ai/Kevin-32B)")
    parser.add_argument("--script", default=None, metavar="FILE",
                        help="recorded responses for --backend scripted")
    parser.add_argument("--evaluator", default=None, metavar="SPEC",
                        help="'cuda' (default) or 'replay:FILE' (recorded verdicts, no GPU)")
    parser.add_argument("--max-tokens", type=_positive_int, default=None, metavar="N",
                        help="cap on generated tokens per reply (default 16384; Kevin writes 16k-22k)")
    parser.add_argument("--temperature", type=float, default=None, metavar="T",
                        help="sampling temperature (default 0.9, as in Kevin's paper)")
    add_evaluation_arguments(parser)
    parser.add_argument("--gpu", default=None, metavar="NAME", help="GPU named in the prompt")


# flag attribute -> BackendSettings field
BACKEND_FLAGS = {"backend": "backend", "base_url": "base_url", "model": "model", "script": "script",
                 "max_tokens": "max_tokens", "temperature": "temperature"}


def run_request(args: argparse.Namespace, target: Optional[str] = None) -> Any:
    """The flags as a run service request for ``target`` (settings are resolved by the service)."""
    from pathlib import Path

    from kevin_agent.errors import UserInputError
    from kevin_agent.runs.request import RunRequest

    shape = {"--trajectories": args.trajectories, "--turns": args.turns, "--beam": args.beam,
             "--beam-every": args.beam_every, "--target-speedup": args.target_speedup}
    given = [flag for flag, value in shape.items() if value is not None]
    if args.resume and given:
        raise UserInputError(f"{given[0]} cannot change when resuming: run {args.resume} keeps the shape "
                             "it started with (see `kevin show`); start a new run to change it")
    flags = {field: getattr(args, attr, None) for attr, field in BACKEND_FLAGS.items()}
    script = flags.get("script")
    if script:
        flags["script"] = str(Path(script).expanduser().resolve())
    return RunRequest(
        target=target, resume=args.resume, trajectories=args.trajectories or RunRequest.trajectories,
        turns=args.turns or RunRequest.turns, target_speedup=args.target_speedup, beam_keep=args.beam,
        beam_every=args.beam_every or RunRequest.beam_every,
        backend_flags=flags, eval_flags=eval_flags(args), evaluator=args.evaluator, gpu_name=args.gpu,
    )


def _play_in_thread(prepared: Any, cancel: threading.Event) -> Any:
    """Play off the main thread so Ctrl-C reaches us; re-raise its exceptions here."""
    from kevin_agent.commands.interrupts import play_interruptible

    def cancelling() -> None:
        print("kevin optimize: cancelling; finished work is kept (Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)

    def quitting() -> None:
        prepared.abandon()
        print(f"kevin optimize: stopped; continue with `kevin optimize --resume {prepared.run_id}`",
              file=sys.stderr, flush=True)

    return play_interruptible(prepared.play, cancel, name="kevin-session", on_cancel=cancelling,
                              on_quit=quitting)


def _summary(record: Any) -> dict[str, Any]:
    """``--json``'s summary of one run."""
    from kevin_agent.run_table import run_summary_dict
    from kevin_agent.verdict_text import replay_note

    summary = run_summary_dict(record)
    summary["resume_command"] = f"kevin optimize --resume {record.run_id}" if record.status != "done" else None
    summary["replayed"] = replay_note(record)  # None when the verdicts were measured here
    return summary


def _report(args: argparse.Namespace, records: list[Any]) -> None:
    """The table and conclusion of each run (or --json: one summary, a list for several) on stdout;
    how to resume on stderr."""
    import json

    from kevin_agent.progress import print_run_result, stdout_console

    if args.json:
        summaries = [_summary(record) for record in records]
        print(json.dumps(summaries if len(args.target) > 1 else summaries[0], indent=2))
    for record in records:
        if not args.json:
            print_run_result(stdout_console(), record)
        resume_hint = f"kevin optimize --resume {record.run_id}"
        if record.status == "cancelled":
            print(f"kevin optimize: cancelled; resume with: {resume_hint}", file=sys.stderr)
        elif record.status == "failed":
            print(f"kevin optimize: {record.error} (run {record.run_id} kept; resume with: "
                  f"{resume_hint})", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kevin_agent.progress import make_progress
    from kevin_agent.runs.service import RunService

    if len(args.target) > 1:
        from kevin_agent.commands.optimize_many import run_many

        outcomes = run_many([run_request(args, target) for target in args.target])
        _report(args, [outcome.record for outcome in outcomes])
        return next((outcome.exit_code for outcome in outcomes if outcome.exit_code), 0)
    progress = make_progress(Console(file=sys.stderr))
    with RunService() as service:
        prepared = service.open(run_request(args, args.target[0] if args.target else None), progress)
        with progress:
            outcome = _play_in_thread(prepared, threading.Event())
        _report(args, [outcome.record])
    return outcome.exit_code
