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
}

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kevin",
        description="Write, verify and commit CUDA kernels for PyTorch modules with the Kevin model.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(f"kevin_agent.commands.{module_name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
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
    """Entry point: returns the exit code (0 ok, 2 user-input error, 3 environment error)."""
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
