"""``kevin eval TASK CANDIDATE.py``: judge one candidate kernel and print its verdict.

Exit 0 whenever it evaluated (any verdict), 2 for bad input, 3 for a missing nvcc (or torch), and
3 when no CUDA device is visible: then the static checks and the compile still run and their
verdict is printed (exit 0 when they fail: the user learns what is wrong), and one line says that
the GPU stage needs a GPU. Compiling without a GPU, without --arch and without
TORCH_CUDA_ARCH_LIST builds for 9.0 (H100/H200) and says so once. Standard library at module level
only: runs with just torch on a bare GPU host.

On a GPU, the first evaluation starts a warm evaluator (``evaluate.daemon``) for its settings; later
calls with the same settings hand their task and candidate to it and skip every start-up (Python's
torch import, CUDA, worker processes). ``--no-daemon`` or ``KEVIN_EVAL_DAEMON_IDLE_S=0``: never.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kevin_agent.commands.optimize_cmd import add_evaluation_arguments
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.verdict_text import render_verdict

if TYPE_CHECKING:
    from kevin_agent.data import Verdict
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.daemon import DaemonAddress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", metavar="TASK", help="FILE.py::Class, or FILE.py holding one nn.Module")
    parser.add_argument("candidate", metavar="CANDIDATE.py", help="a Kevin-format answer (class ModelNew)")
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.add_argument("--compile-only", action="store_true",
                        help="stop after compiling (no GPU needed; without one it builds for 9.0)")
    parser.add_argument("--trials", type=_positive, default=None, metavar="N",
                        help="correctness trials on fresh inputs (default 5)")
    parser.add_argument("--timing-trials", type=_positive, default=None, metavar="N",
                        help="timed runs per variant (default 100)")
    parser.add_argument("--no-torch-compile", action="store_true", help="do not time the torch.compile reference")
    parser.add_argument("--arch", default=None, metavar="ARCH",
                        help="CUDA architecture to build for, e.g. 8.6 (default: TORCH_CUDA_ARCH_LIST, "
                             "else the device's, else 9.0 on a machine without a GPU)")
    parser.add_argument("--cache", default=None, metavar="DIR", help="build cache directory")
    parser.add_argument("--fresh-baselines", action="store_true",
                        help="time eager and torch.compile again instead of reusing the baselines stored "
                             "for this task, GPU model and torch/CUDA version")
    parser.add_argument("--no-daemon", action="store_true",
                        help="evaluate in this process only: neither use nor start the warm evaluator that "
                             "keeps workers started between `kevin eval` calls (KEVIN_EVAL_DAEMON_IDLE_S=0 "
                             "turns it off for good)")
    add_evaluation_arguments(parser, cluster=False)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def read_candidate(path_text: str) -> str:
    """The candidate's source, or a one-line UserInputError."""
    path = Path(path_text)
    if not path.exists():
        raise UserInputError(f"candidate file not found: {path_text}")
    if path.is_dir():
        raise UserInputError(f"candidate is a directory, not a file: {path_text}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"cannot read candidate {path_text}: {getattr(err, 'strerror', None) or err}") from None


def _arch(text: str | None) -> str | None:
    if text is not None and not re.fullmatch(r"\d+\.\d+(\+PTX)?([ ;]\d+\.\d+(\+PTX)?)*", text):
        raise UserInputError(f"--arch {text!r} is not a CUDA architecture such as 9.0")
    return text


NEEDS_GPU = ("the GPU stage (correctness, timing) needs an NVIDIA GPU, and none is visible here: "
             "only the static checks and the compile ran. Run `kevin eval` on a GPU machine for the "
             "full verdict (`--compile-only` stops after compiling and exits 0)")


def default_arch(requested: str | None, compiles_without_gpu: bool, environ: dict[str, str]) -> str | None:
    """The architecture to build for: --arch; else, compiling without a GPU and without
    TORCH_CUDA_ARCH_LIST, 9.0 (H100/H200); else None (the device's or the variable's)."""
    from kevin_agent.evaluate.environment import COMPILE_ONLY_ARCH

    if requested or not compiles_without_gpu or environ.get("TORCH_CUDA_ARCH_LIST"):
        return requested
    return COMPILE_ONLY_ARCH


def _eval_modes(args: argparse.Namespace) -> dict[str, Any]:
    """--policy and --sandbox over KEVIN_* and [tool.kevin], parsed (one line, exit 2 for a bad one)."""
    from kevin_agent.config import load_config, resolve_eval_settings

    return resolve_eval_settings({"policy": args.policy, "sandbox": args.sandbox}, os.environ, load_config(None))


def _settings(args: argparse.Namespace, compile_only: bool, arch: str | None,
              modes: dict[str, Any]) -> EvalSettings:
    from kevin_agent.evaluate.api import EvalSettings

    defaults = EvalSettings()
    return EvalSettings(
        correctness_trials=args.trials or defaults.correctness_trials,
        timing_trials=args.timing_trials or defaults.timing_trials,
        compile_only=compile_only,
        with_torch_compile=not args.no_torch_compile,
        arch=arch,
        cache_dir=Path(args.cache).expanduser() if args.cache else None,
        fresh_baselines=args.fresh_baselines,
        **modes,  # policy and sandbox, parsed by resolve_eval_settings
    )


def _gpu_visible() -> bool:
    try:
        from kevin_agent.evaluate.environment import detect_device

        return detect_device()[0] is not None
    except ImportError:  # no torch: check_environment says so
        return False


def run(args: argparse.Namespace) -> int:
    from kevin_agent.evaluate.daemon import evaluate_on_daemon
    from kevin_agent.evaluate.evaluator import CudaEvaluator
    from kevin_agent.evaluate.verdicts import static_verdict
    from kevin_agent.task import load_task

    modes = _eval_modes(args)  # first: a bad setting is an error even when the static checks reject
    task = load_task(args.task)
    code = read_candidate(args.candidate)
    warm_settings = None if args.compile_only or args.no_daemon else _settings(args, False, _arch(args.arch), modes)
    address = _warm_address(warm_settings)
    if address is not None:  # a warm evaluator for these settings answers without any start-up here
        warm_verdict = evaluate_on_daemon(address, task, code, on_wait=_say_wait)
        if warm_verdict is not None:
            _print(warm_verdict, args.json)
            _say_baseline(warm_verdict)
            print("kevin eval: evaluated by the warm evaluator an earlier `kevin eval` started (--no-daemon "
                  "evaluates in this process)", file=sys.stderr)
            return 0
    without_gpu = not args.compile_only and not _gpu_visible()
    if without_gpu:  # what can be judged here still is: static checks first, needing nothing
        rejected = static_verdict(code, task.source)
        if rejected is not None:
            _print(rejected, args.json)
            return 0
    compiles_without_gpu = without_gpu or (args.compile_only and not _gpu_visible())
    arch = default_arch(_arch(args.arch), compiles_without_gpu, dict(os.environ))
    settings = _settings(args, args.compile_only or without_gpu, arch, modes)
    evaluator = CudaEvaluator(settings)
    try:
        try:
            evaluator.check_environment()
        except EnvironmentProblem as problem:
            if without_gpu:
                raise EnvironmentProblem(f"the static checks passed, but to compile: {problem}") from None
            raise
        verdict = evaluator.evaluate(task, [code], on_wait=_say_wait)[0]
    finally:
        evaluator.close()
    _print(verdict, args.json)
    if arch is not None and args.arch is None and verdict.stage.value != "static":  # said once
        print(f"kevin eval: no GPU here, so this compiled for CUDA architecture {arch} (H100/H200); "
              "--arch or TORCH_CUDA_ARCH_LIST picks another", file=sys.stderr)
    _say_baseline(verdict)
    if without_gpu and verdict.ok:
        print(f"kevin eval: {NEEDS_GPU}", file=sys.stderr)
        return 3
    if address is not None and not without_gpu and settings == warm_settings:
        _start_warm(address, settings)
    return 0


def _warm_address(settings: EvalSettings | None) -> DaemonAddress | None:
    """Where the warm evaluator for ``settings`` listens (None: not kept for them, or turned off)."""
    if settings is None:
        return None
    from kevin_agent.evaluate.daemon import daemon_address

    return daemon_address(settings)


def _start_warm(address: DaemonAddress, settings: EvalSettings) -> None:
    """Start the warm evaluator for the next `kevin eval` with these settings, and say so."""
    from kevin_agent.evaluate.daemon import idle_seconds, start_daemon

    idle = idle_seconds()
    if start_daemon(address, settings, idle) is not None:
        print(f"kevin eval: started a warm evaluator that keeps GPU workers ready for {idle:g} s after each "
              "evaluation with these settings (--no-daemon, or KEVIN_EVAL_DAEMON_IDLE_S=0, evaluates in "
              "this process only)", file=sys.stderr)


def _say_wait(text: str) -> None:
    print(f"kevin eval: {text}", file=sys.stderr, flush=True)


def _say_baseline(verdict: Verdict) -> None:
    note = baseline_note(verdict)
    if note:
        print(f"kevin eval: {note}", file=sys.stderr)


def baseline_note(verdict: Verdict) -> str | None:
    """How long this evaluation spent measuring the task's baselines, when it did."""
    seconds = verdict.details.timing.baseline_seconds
    if seconds is None:
        return None
    gpu = verdict.details.environment.gpu_name or "the GPU"
    return (f"measured this task's baselines (eager, torch.compile) on {gpu} "
            f"in {seconds:.1f} s; later evaluations of this task reuse them (--fresh-baselines measures again)")


def _print(verdict: Verdict, as_json: bool) -> None:
    print(json.dumps(verdict.to_dict(), indent=2) if as_json else render_verdict(verdict))
