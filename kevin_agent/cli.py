"""The ``kevin`` command. Each subcommand lives in ``kevin_agent.commands.<name>``.

Command modules import nothing heavy at module level (torch, git, openai, vllm, pygls, textual
are imported inside ``run``), so ``python -m kevin_agent eval`` works on a bare GPU host.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from kevin_agent.errors import KevinError

# subcommand -> (module under kevin_agent.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("eval_cmd", "evaluate a candidate kernel against a task"),
    "prompt": ("prompt_cmd", "print the turn-0 prompt the model sees for a task"),
    "optimize": ("optimize_cmd", "write and refine a CUDA kernel for a module with the model"),
    "bench": ("bench_cmd", "benchmark a model on KernelBench-format tasks (the Kevin/KernelBench table)"),
    "runs": ("runs_cmd", "list stored runs"),
    "show": ("show_cmd", "show a stored run or one of its candidates"),
    "export": ("export_cmd", "export a run, e.g. as RL training data"),
    "report": ("report_cmd", "plot a run's speedup per turn (PNG + HTML)"),
    "diff": ("diff_cmd", "show what accepting a candidate would write"),
    "accept": ("accept_cmd", "write the winning kernel into the repository and commit it"),
    "undo": ("undo_cmd", "revert the latest kevin-agent commit"),
    "lsp": ("lsp_cmd", "run the language server (stdio)"),
    "tui": ("tui_cmd", "open the terminal UI"),
    "doctor": ("doctor_cmd", "check this machine: torch, nvcc, GPUs, and the sandbox for model code"),
    "cache": ("cache_cmd", "show the build cache's place and size by part; `kevin cache clear` empties it"),
}

# code -> what it means, for every command: `kevin --help` and README's table are made from this
# (errors.KevinError 1, UserInputError 2, EnvironmentProblem 3; Ctrl-C 130, in ``main``)
EXIT_CODE_TABLE: tuple[tuple[int, str], ...] = (
    (0, "done"),
    (1, "run failed (kept, resumable with --resume), or another command failed"),
    (2, "bad input: a file, class, flag or config key to fix (one line names it)"),
    (3, "environment: no GPU, no nvcc, a missing package"),
    (130, "cancelled with Ctrl-C (a run is kept, resumable with --resume)"),
)


def exit_codes_line(table: tuple[tuple[int, str], ...] = EXIT_CODE_TABLE) -> str:
    """The exit codes as one help line: "exit codes: 0 done; 1 failed (...); ..."."""
    return "exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in table)


def exit_codes_markdown(table: tuple[tuple[int, str], ...] = EXIT_CODE_TABLE) -> str:
    """The exit codes as README's table."""
    return "\n".join(["| exit code | meaning |", "|---|---|", *(f"| {code} | {meaning} |" for code, meaning in table)])


EXIT_CODES = exit_codes_line()
# subcommand -> its exit codes, where they differ from EXIT_CODES
COMMAND_EXIT_CODES = {
    "eval": "exit codes: 0 evaluated (whatever the verdict); 2 bad input; 3 environment (no nvcc or torch), "
            "or no GPU for the GPU stage (the static checks and compile still ran); 130 cancelled with Ctrl-C",
}
SETTINGS_COMMANDS = ("optimize", "prompt", "tui", "lsp", "eval")  # read [tool.kevin] and KEVIN_* variables


def environment_help() -> str:
    """The variables `kevin optimize` and the faces read (config.ENV_VARS, config.EVAL_ENV_VARS)."""
    from kevin_agent.config import ENV_VARS, EVAL_ENV_VARS

    names = [var for var, _ in ENV_VARS + EVAL_ENV_VARS if var not in ("KEVIN_API_KEY", "OPENAI_API_KEY")]
    return ("environment: KEVIN_API_KEY (else OPENAI_API_KEY) is the model server's key; "
            f"{', '.join(names)} set defaults (flags win; then the variables; then [tool.kevin] in "
            "pyproject.toml or kevin.toml)")


class ParagraphHelp(argparse.HelpFormatter):
    """Wraps each paragraph of a description or epilog on its own (blank lines stay)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(super(ParagraphHelp, self)._fill_text(part, width, indent)
                           for part in text.split("\n\n"))


def _epilog(name: str) -> str:
    parts = [COMMAND_EXIT_CODES.get(name, EXIT_CODES)]
    if name in SETTINGS_COMMANDS:
        parts.append(environment_help())
    return "\n\n".join(parts)


def build_parser() -> argparse.ArgumentParser:
    from kevin_agent import __version__

    parser = argparse.ArgumentParser(
        prog="kevin",
        description="Write, verify and commit CUDA kernels for PyTorch modules with the Kevin model.",
        epilog=f"{EXIT_CODES}; `kevin COMMAND --help` gives each command's.\n\n{environment_help()}",
        formatter_class=ParagraphHelp,
    )
    parser.add_argument("--version", action="version", version=f"kevin-agent {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(f"kevin_agent.commands.{module_name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text, epilog=_epilog(name),
                                    formatter_class=ParagraphHelp)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


class _NoCudaRuntimeNote(logging.Filter):
    """Drops torch's "No CUDA runtime is found, using CUDA_HOME=..." warning, logged whenever
    torch.utils.cpp_extension is imported on a machine without a GPU (we import it to compile
    there, and say ourselves what needs a GPU)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")


def quiet_torch_warnings() -> None:
    """Install the filter on torch's cpp_extension logger (before or after torch is imported)."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoCudaRuntimeNote) for f in logger.filters):
        logger.addFilter(_NoCudaRuntimeNote())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns the exit code (``EXIT_CODE_TABLE``)."""
    quiet_torch_warnings()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KevinError as err:
        print(f"kevin {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"kevin {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `kevin show RUN | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
