"""Static rules over what reaches a compiler: the load_inline flags and paths must be on the
allow-list of ``source.flags`` (the build refuses the same again for arguments only known at run
time), and constant folding stays within its bounds (``source.consts``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any, Optional

from kevin_agent.evaluate.source.calls import bind_arguments
from kevin_agent.evaluate.source.consts import (
    MAX_SOURCE_BYTES,
    Budget,
    ConstantTooLarge,
    ConstEval,
    NotStatic,
    bind_assignments,
)
from kevin_agent.evaluate.source.flags import FLAG_ARGUMENTS, PATH_ARGUMENTS, argument_problems
from kevin_agent.evaluate.static.context import CandidateContext
from kevin_agent.evaluate.static.rule import Violation

_CHECKED = (*FLAG_ARGUMENTS, *PATH_ARGUMENTS)


def source_too_large(code: str) -> Optional[Violation]:
    """The rejection of a file over MAX_SOURCE_BYTES (checked before it is parsed)."""
    size = len(code.encode("utf-8", errors="replace"))
    if size <= MAX_SOURCE_BYTES:
        return None
    return Violation("source-size", None, f"The answer is {size:,} bytes; the limit is {MAX_SOURCE_BYTES:,} "
                     "(1 MB): write the kernels compactly, without generated or padded source.")


def _module_constants(ctx: CandidateContext, budget: Budget) -> dict[str, Any]:
    env: dict[str, Any] = {}
    bind_assignments(ctx.tree.body, env, budget)
    return env


def check_constant_sizes(ctx: CandidateContext) -> Iterator[Violation]:
    try:
        _module_constants(ctx, Budget())
    except ConstantTooLarge as exc:
        yield Violation("source-size", exc.line, str(exc).split(": ", 1)[-1].capitalize() + ".")


def check_build_arguments(ctx: CandidateContext) -> Iterator[Violation]:
    if not ctx.load_inline_calls:
        return
    budget = Budget()
    try:
        env = _module_constants(ctx, budget)
    except ConstantTooLarge:
        return  # check_constant_sizes says so
    for call in ctx.load_inline_calls:
        try:
            bound = bind_arguments(call)
        except NotStatic:
            continue
        values = {name: value for name, value in _folded(bound, env, budget) if name in _CHECKED}
        for name, message in argument_problems(values):
            yield Violation("build-flags", getattr(bound.get(name), "lineno", call.lineno), message)


def _folded(bound: dict[str, ast.expr], env: dict[str, Any], budget: Budget) -> Iterator[tuple[str, Any]]:
    """(name, value) of each argument that folds to a constant (others are checked by the build)."""
    for name, expr in bound.items():
        if name in _CHECKED:
            try:
                yield name, ConstEval(dict(env), budget)(expr)
            except (NotStatic, ConstantTooLarge, TypeError, ValueError, KeyError, IndexError):
                continue
