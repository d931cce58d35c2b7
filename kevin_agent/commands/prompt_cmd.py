"""``kevin prompt TASK [--gpu NAME] [--policy P]``: print the turn-0 prompt the model sees for a task."""

from __future__ import annotations

import argparse
import sys

from kevin_agent.eval_modes import POLICIES, choices_metavar


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", metavar="TASK", help="FILE.py::ClassName, or FILE.py with one module")
    parser.add_argument(
        "--gpu", metavar="NAME", default=None,
        help="GPU named in the prompt (default: this machine's GPU, else [tool.kevin] target_gpu)",
    )
    parser.add_argument(
        "--policy", default=None, metavar=choices_metavar(POLICIES),
        help="provenance policy the prompt states (default: KEVIN_POLICY, else [tool.kevin] policy, else strict)",
    )
    parser.add_argument(
        "--tokens", action="store_true",
        help="also print the prompt's token count (model tokenizer if cached, else an estimate) to stderr",
    )


def run(args: argparse.Namespace) -> int:
    import os

    from kevin_agent.config import load_config, resolve_backend_settings, resolve_eval_settings
    from kevin_agent.eval_modes import DEFAULT_POLICY
    from kevin_agent.prompts import target_gpu_name, turn0_prompt
    from kevin_agent.task import load_task

    task = load_task(args.task)
    config = load_config(None)
    settings = resolve_backend_settings({}, os.environ, config)
    eval_settings = resolve_eval_settings({"policy": getattr(args, "policy", None)}, os.environ, config)
    policy = eval_settings.get("policy", DEFAULT_POLICY)
    gpu = target_gpu_name(args.gpu, settings.target_gpu)
    prompt = turn0_prompt(task, gpu, policy)
    sys.stdout.write(prompt)
    if args.tokens:
        from kevin_agent.tokens import counter_kind, make_token_counter

        counter = make_token_counter(settings.model)
        print(f"{counter(prompt)} tokens ({counter_kind(counter)}, {settings.model})", file=sys.stderr)
    return 0
