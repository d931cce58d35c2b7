"""Small widgets of the run screen: the speedup plot and the progress line."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from kevin_agent.run_table import turn_label

BLOCKS = "▁▂▃▄▅▆▇█"


def best_so_far(points: dict[int, dict[int, float]], turns: int) -> dict[int, list[Optional[float]]]:
    """trajectory -> best speedup up to each turn (None for turns not judged yet)."""
    series: dict[int, list[Optional[float]]] = {}
    for trajectory in sorted(points):
        best = 0.0
        line: list[Optional[float]] = []
        for turn in range(turns):
            value = points[trajectory].get(turn)
            if value is None:
                line.append(None)
                continue
            best = max(best, value)
            line.append(best)
        series[trajectory] = line
    return series


def sparkline(values: list[Optional[float]], top: float) -> Text:
    """One trajectory: a block per turn, height by speedup; green above eager (1.0x)."""
    text = Text()
    for value in values:
        if value is None:
            text.append(" · ", style="dim")
        elif value <= 0:
            text.append(" ✗ ", style="red")
        else:
            level = min(len(BLOCKS) - 1, int(value / top * (len(BLOCKS) - 1) + 0.5))
            text.append(f" {BLOCKS[level] * 2}", style="green" if value > 1.0 else "yellow")
    return text


class SpeedupPlot(Widget):
    """Best speedup vs eager so far, per turn, one line per trajectory."""

    DEFAULT_CSS = """
    SpeedupPlot { height: auto; max-height: 10; padding: 0 1; }
    """

    points: reactive[dict[int, dict[int, float]]] = reactive(dict, always_update=True, layout=True)

    def __init__(self, turns: int = 1, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.turns = max(1, turns)

    def set_point(self, trajectory: int, turn: int, speedup: float) -> None:
        """Record one judged candidate (speedup 0 when not correct or not believed)."""
        points = dict(self.points)
        points.setdefault(trajectory, {})[turn] = speedup
        self.turns = max(self.turns, turn + 1)
        self.points = points

    def render(self) -> Text:
        series = best_so_far(self.points, self.turns)
        top = max([1.0] + [v for line in series.values() for v in line if v is not None])
        text = Text("best speedup vs eager per turn", style="bold")
        text.append(f"   (█ = {top:.2f}x, green beats eager)\n", style="dim")
        if not series:
            text.append("no verdicts yet", style="dim")
        else:
            cells = "".join(f" {turn:<2}" for turn in range(self.turns))  # over each turn's cell
            text.append(f"   {cells}  turn\n", style="dim")
        for trajectory, line in series.items():
            text.append(f"t{trajectory:<2}")
            text.append_text(sparkline(line, top))
            last = next((v for v in reversed(line) if v is not None), 0.0)
            text.append(f"  {last:.2f}x\n" if last else "  -\n")
        text.rstrip()
        return text


class RunProgress(Static):
    """One line: status, turn, tokens generated, compile and timing queues."""

    DEFAULT_CSS = """
    RunProgress { height: 1; padding: 0 1; background: $boost; }
    """

    def show(self, status: str, turn: int, turns: int, tokens: int, compiling: int,
             timing: int) -> None:
        self.update(f"{status} · turn {turn_label(min(turn, turns - 1), turns)} · {tokens:,} tokens · "
                    f"compiling {compiling} · timing {timing}")
