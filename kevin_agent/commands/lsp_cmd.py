"""Placeholder: filled in by the issue that owns this command."""

from __future__ import annotations

import argparse

from kevin_agent.errors import UserInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs="*")


def run(args: argparse.Namespace) -> int:
    raise UserInputError("this command is not built yet")
