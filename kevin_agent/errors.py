"""Errors that reach the user as one clear line and an exit code, never a traceback."""

from __future__ import annotations


class KevinError(Exception):
    """Base: ``str(err)`` is the one line shown to the user."""

    exit_code = 1


class UserInputError(KevinError):
    """The user must fix something they gave us (file, class, flag, config). Exit code 2."""

    exit_code = 2


class EnvironmentProblem(KevinError):
    """The machine lacks something (CUDA device, nvcc, a package). Exit code 3."""

    exit_code = 3
