"""The CLI's view of a run: a live rich display on a terminal, plain lines otherwise, and the
final table of candidates."""

from __future__ import annotations

import threading
from typing import IO, Any, Optional

from kevin_agent.events import (
    CandidateGenerated,
    Event,
    GpuWaiting,
    ModelRetrying,
    RunDone,
    RunStarted,
    TurnDone,
    TurnStarted,
    VerdictReady,
)
from kevin_agent.run_record import RunRecord
from kevin_agent.run_table import CandidateRow, candidate_rows, conclude, plural, turn_label
from kevin_agent.run_table import speedup_text as _speedup
from kevin_agent.runs.state import RunView
from kevin_agent.verdict_text import is_replayed, replay_note, untrusted_label


def verdict_line(event: VerdictReady) -> str:
    verdict = event.verdict
    outcome = f"{verdict.stage.value} {'ok' if verdict.ok else 'failed'}"
    untrusted = untrusted_label(verdict)
    if verdict.counts_as_best:
        outcome += f", {_speedup(verdict.speedup)} vs eager"
    elif untrusted:
        outcome += f", {untrusted}"
    if is_replayed(verdict.details):
        outcome += " (replayed)"
    return f"  {event.candidate.id}: {outcome}"


class PlainProgress:
    """One line per event that matters (no token or queue chatter); for pipes and logs."""

    def __init__(self, out: IO[str], prefix: str = "") -> None:
        self.out = out
        self.prefix = prefix  # names the run when several share the stream (``kevin optimize A B``)
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        line = self._line(event)
        if line is not None:
            with self._lock:
                print(f"{self.prefix}{line}", file=self.out, flush=True)

    @staticmethod
    def _line(event: Event) -> Optional[str]:
        if isinstance(event, RunStarted):
            return (f"run {event.run_id}: {event.class_name}, {plural(event.trajectories, 'trajectory')}"
                    f" x {plural(event.turns, 'turn')}")
        if isinstance(event, TurnStarted):
            return f"turn {event.turn}: asking the model"
        if isinstance(event, CandidateGenerated):
            c = event.candidate
            problem = f" (format error: {c.parse_error})" if c.parse_error else ""
            return f"  {c.id}: generated, {c.tokens} tokens{problem}"
        if isinstance(event, VerdictReady):
            return verdict_line(event)
        if isinstance(event, (GpuWaiting, ModelRetrying)):
            return f"  {event.message}"
        if isinstance(event, TurnDone):
            return f"turn {event.turn} done; best so far {_speedup(event.best_speedup or None)}"
        if isinstance(event, RunDone):
            return f"run {event.run_id} {'cancelled' if event.cancelled else 'done'}"
        return None  # RunFailed: the command prints the one line (with how to resume)

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class LiveProgress:
    """A rich Live panel: turn, per-trajectory tokens and state, queues, best speedup."""

    def __init__(self, console: Any) -> None:
        from rich.live import Live

        self.console = console
        self._lock = threading.Lock()
        self.view = RunView()
        self._live = Live(get_renderable=self._render, console=console, refresh_per_second=4,
                          transient=True)

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.view.apply(event)
        if isinstance(event, (VerdictReady, ModelRetrying)):  # RunFailed: the command says it once
            message = verdict_line(event) if isinstance(event, VerdictReady) else f"  {event.message}"
            self._live.console.print(message, highlight=False, markup=False)

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            v = self.view
            waiting = f" · {v.waiting}" if v.waiting else ""
            header = Text(f"run {v.run_id} · {v.class_name} · turn {turn_label(v.turn, v.turns)}"
                          f" · compile queue {v.compiling} · GPU queue {v.timing} · best "
                          f"{_speedup(v.best_speedup or None)}{waiting}", no_wrap=True, overflow="ellipsis")
            table = Table()
            table.add_column("trajectory", justify="right")
            table.add_column("tokens", justify="right")
            table.add_column("state")
            for index in sorted(v.trajectory_state):
                table.add_row(str(index), str(v.tokens.get(index, 0)), v.trajectory_state[index])
        return Group(header, table)


def make_progress(console: Any) -> Any:
    """A live display when ``console`` (stderr) is a terminal; plain lines otherwise."""
    if console.is_terminal:
        return LiveProgress(console)
    return PlainProgress(console.file)


def stdout_console() -> Any:
    """A rich console for stdout; wide when piped so ids and numbers are never truncated."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=240)


def _optional(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def candidates_table(rows: list[CandidateRow], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in ("candidate", "traj", "turn", "stage", "ok", "kernel ms", "vs eager",
                 "vs compile", "SOL %", "measured on"):
        table.add_column(name, justify="right" if name not in ("candidate", "stage", "measured on") else "left")
    for r in rows:
        ok = "pending" if r.ok is None else ("yes" if r.ok else "no")
        if r.untrusted:
            ok += f" ({r.untrusted})"
        table.add_row(r.candidate_id, str(r.trajectory), str(r.turn), r.stage, ok,
                      _optional(r.kernel_ms, "{:.3f}"), _optional(r.speedup_vs_eager, "{:.2f}x"),
                      _optional(r.speedup_vs_compile, "{:.2f}x"), _optional(r.sol_percent, "{:.0f}"),
                      r.measured_on or "-")
    return table


def print_run_result(console: Any, record: RunRecord) -> None:
    """The table of candidates and the conclusion, as ``kevin optimize`` and ``kevin show`` end;
    nothing for a run that stopped before any candidate (its one line says why)."""
    rows = candidate_rows(record)
    if not rows and record.status != "done":
        return
    console.print(candidates_table(rows, f"run {record.run_id} ({record.status})"))
    text = conclude(record).text
    console.print(text, highlight=False, markup=False)
    note = replay_note(record, text)
    if note:
        console.print(note, highlight=False, markup=False)
    for note in record.notes:
        console.print(f"Note: {note}.", highlight=False, markup=False)
