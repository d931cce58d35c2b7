"""An Information diagnostic on the class line with the state of its Kevin run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from lsprotocol import types

from kevin_agent.lsp.documents import Scan, class_line
from kevin_agent.lsp.runs import RunState

SOURCE = "kevin"


def run_diagnostic(state: RunState, line: int, line_length: int) -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(types.Position(line, 0), types.Position(line, line_length)),
        message=state.summary(),
        severity=types.DiagnosticSeverity.Information,
        source=SOURCE,
        code=state.run_id or state.status,
    )


def run_diagnostics(states: Iterable[RunState], scan: Optional[Scan], source: str) -> list[types.Diagnostic]:
    """One diagnostic per run of the buffer, on its class's current line (or where it started)."""
    lines = source.splitlines()
    found = []
    for state in states:
        line = class_line(scan.classes, state.class_name) if scan is not None else None
        if line is None:
            origin = state.task.origin
            line = origin.start_line - 1 if origin is not None else 0
        line = max(0, min(line, len(lines) - 1)) if lines else 0
        found.append(run_diagnostic(state, line, len(lines[line]) if lines else 0))
    return found
