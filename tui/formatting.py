"""Plain text for the TUI's tables and panels, from core data (no widgets here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from kevin_agent.data import Candidate, Verdict
from kevin_agent.run_table import candidate_row
from kevin_agent.verdict_text import untrusted_label

ROW_COLUMNS = ("id", "traj", "turn", "verdict", "kernel ms", "x eager", "x compile", "SoL %")
ROW_WIDTHS = (6, 4, 4, 18, 9, 7, 9, 5)  # fixed: rows arrive one by one during a run


def fill_table(table: Any, headers: Sequence[str], rows: Sequence[Sequence[str]],
               keys: Sequence[str]) -> None:
    """Replace a DataTable's columns and rows, columns sized to their content (not lazily)."""
    table.clear(columns=True)
    for index, header in enumerate(headers):
        width = max([len(header)] + [len(row[index]) for row in rows])
        table.add_column(header, width=width)
    for row, key in zip(rows, keys):
        table.add_row(*row, key=key)


def _num(value: Optional[float], pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def verdict_label(verdict: Optional[Verdict]) -> str:
    """A short cell: the stage reached and whether it passed, or the speed verdict."""
    if verdict is None:
        return "evaluating"
    untrusted = untrusted_label(verdict, short=True)
    if untrusted:
        return untrusted
    if verdict.counts_as_best:
        return "correct"
    if verdict.ok:
        return f"{verdict.stage.value} ok"
    return f"{verdict.stage.value} failed"


def row_cells(candidate: Candidate, verdict: Optional[Verdict]) -> tuple[str, ...]:
    """One DataTable row: the candidate id (t1.1, as `kevin show` takes it), trajectory, turn,
    verdict, kernel ms, speedups, speed-of-light %."""
    row = candidate_row(candidate, verdict)
    return (
        candidate.id,
        str(candidate.trajectory),
        str(candidate.turn),
        verdict_label(verdict),
        _num(row.kernel_ms, "{:.3f}"),
        _num(row.speedup_vs_eager, "{:.2f}x"),
        _num(row.speedup_vs_compile, "{:.2f}x"),
        _num(row.sol_percent, "{:.0f}"),
    )


def cuda_sources(code: Optional[str]) -> str:
    """The C++/CUDA sources of the candidate's load_inline calls, joined; "" when none extracted."""
    if not code:
        return ""
    from kevin_agent.accept.extract import CandidateSource, find_extension_calls
    from kevin_agent.errors import KevinError

    try:
        calls = find_extension_calls(CandidateSource.parse(code))
    except (KevinError, SyntaxError, ValueError, RecursionError, MemoryError):  # too deep: shown without
        return ""
    parts = []
    for call in calls:
        for source in (call.cuda_source, call.cpp_source):
            if source and source.strip():
                parts.append(source.strip("\n"))
    return "\n\n".join(parts) + ("\n" if parts else "")

