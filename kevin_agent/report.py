"""``kevin report``: best-so-far speedup per turn per trajectory, as a PNG and an HTML page.

The plot has one line per trajectory (the fastest kernel that counts as best in its history so
far, 0 before any) and horizontal reference lines for eager (1.0x) and torch.compile
(eager_ms / compile_ms). The HTML page embeds the PNG as base64 and lists every candidate.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from kevin_agent.run_record import RunRecord
from kevin_agent.run_table import candidate_rows, conclude
from kevin_agent.verdict_text import is_replayed, measured_label, replay_note


@dataclass
class ReportData:
    """Exactly what gets plotted."""

    turns: list[int]  # turn indices on the x axis, 0-based like candidate ids t<trajectory>.<turn>
    series: dict[int, list[Optional[float]]] = field(default_factory=dict)  # trajectory -> per turn
    eager_line: float = 1.0
    compile_line: Optional[float] = None  # eager_ms / compile_ms, when torch.compile was timed


@dataclass(frozen=True)
class ReportFiles:
    png: Path
    html: Path


def report_data(record: RunRecord) -> ReportData:
    """Speedups of the run's main GPU model only, when it spans several (a cluster): speedups
    measured on different models are never compared."""
    several = len(record.gpu_names()) > 1
    verdicts = {c.id: v for c, v in record.candidates
                if v is not None and (not several or v.details.environment.gpu_name in (record.gpu_name, None))}
    played = sorted({c.turn for c, _ in record.candidates})
    turns = list(range(played[-1] + 1)) if played else []
    series: dict[int, list[Optional[float]]] = {}
    for candidate, verdict in record.candidates:
        values = series.setdefault(candidate.trajectory, [None] * len(turns))
        if verdict is None:
            continue
        lineage = record.lineage(candidate.id)
        best = 0.0
        for cid in lineage:
            ancestor = verdicts.get(cid)
            if ancestor is not None and ancestor.counts_as_best:
                best = max(best, ancestor.speedup)
        values[candidate.turn] = best
    return ReportData(turns=turns, series=dict(sorted(series.items())),
                      compile_line=_compile_reference(record))


def _compile_reference(record: RunRecord) -> Optional[float]:
    for _, verdict in record.candidates:
        details = verdict.details if verdict else None
        if details and details.timing.eager and details.timing.compiled and details.timing.compiled.median_ms > 0:
            return details.timing.eager.median_ms / details.timing.compiled.median_ms
    return None


def render_png(data: ReportData, title: str) -> bytes:
    buffer = io.BytesIO()
    figure(data, title).savefig(buffer, format="png", metadata={"Title": " ".join(title.split())})
    return buffer.getvalue()


def figure(data: ReportData, title: str):  # -> matplotlib.figure.Figure
    """The plot: turns on the x axis numbered from 0, like candidate ids t<trajectory>.<turn>."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=100)
    axes = fig.subplots()
    xs = list(data.turns)
    for trajectory, values in data.series.items():
        points = [(x, v) for x, v in zip(xs, values) if v is not None]
        if points:
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                      label=f"trajectory {trajectory}")
    axes.axhline(data.eager_line, color="black", linestyle="--", linewidth=1, label="eager (1.0x)")
    if data.compile_line is not None:
        axes.axhline(data.compile_line, color="tab:red", linestyle=":", linewidth=1.5,
                     label=f"torch.compile ({data.compile_line:.2f}x)")
    axes.set_xlabel("turn (from 0, as in candidate ids t<trajectory>.<turn>)")
    axes.set_ylabel("best speedup so far vs eager")
    axes.set_title(title)
    if xs:
        axes.set_xticks(xs)
    axes.set_ylim(bottom=0)
    axes.legend(loc="best", fontsize="small")
    fig.tight_layout()
    return fig


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape(str(value))


def _replay_paragraph(record: RunRecord) -> str:
    note = replay_note(record, conclude(record).text)
    return f'\n<p class="replayed"><em>{html.escape(note)}</em></p>' if note else ""


def plot_title(record: RunRecord) -> str:
    """The PNG's title: the class and run, and for replayed verdicts where they were measured
    ("measured on NVIDIA H200 in run X, replayed here"), wrapped to fit the figure."""
    import textwrap

    labels = sorted({label for _, v in record.candidates if v is not None and is_replayed(v.details)
                     for label in [measured_label(v.details)] if label})
    where = f": {'; '.join(labels)}" if labels else ""
    return "\n".join(textwrap.wrap(f"{record.task.class_name}, run {record.run_id}{where}", 70))


def render_html(record: RunRecord, png: bytes) -> str:
    rows = candidate_rows(record)
    header = ("candidate", "trajectory", "turn", "stage", "ok", "kernel ms", "vs eager",
              "vs torch.compile", "SOL %", "trust", "measured on", "message")
    body = "\n".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in (
            r.candidate_id, r.trajectory, r.turn, r.stage, r.ok, r.kernel_ms, r.speedup_vs_eager,
            r.speedup_vs_compile, r.sol_percent, r.untrusted, r.measured_on, r.message)) + "</tr>"
        for r in rows
    )
    title = f"kevin run {record.run_id}: {record.task.class_name}"
    image = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:90%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Status: {html.escape(record.status)}. Created {html.escape(record.created)}.</p>
<p><strong>{html.escape(conclude(record).text)}</strong></p>{_replay_paragraph(record)}
{_by_gpu_html(record)}
<img alt="best speedup so far per turn per trajectory" src="data:image/png;base64,{image}">
<table id="candidates"><thead><tr>{"".join(f"<th>{h}</th>" for h in header)}</tr></thead>
<tbody>
{body}
</tbody></table></body></html>
"""


def _by_gpu_html(record: RunRecord) -> str:
    """For a run spanning several GPU models: the best kernel on each (the plot shows the main one)."""
    names = record.gpu_names()
    if len(names) < 2:
        return ""
    best = record.best_by_gpu()
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{_cell(best[name][0].id if name in best else None)}</td>"
        f"<td>{_cell(best[name][1].speedup if name in best else None)}</td></tr>" for name in names)
    return (f"<p>Measured on {len(names)} GPU models; speedups are compared only within one model, and the "
            f"plot shows {html.escape(names[0])}.</p>\n<table id=\"by-gpu\"><thead><tr><th>GPU</th>"
            f"<th>best candidate</th><th>vs eager</th></tr></thead><tbody>{rows}</tbody></table>")


def write_report(record: RunRecord, out_dir: Path) -> ReportFiles:
    """Write ``<run>.png`` and ``<run>.html`` into ``out_dir`` (created when missing)."""
    from kevin_agent.atomic import write_bytes_atomically, write_text_atomically

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = render_png(report_data(record), plot_title(record))
    png_path = out_dir / f"{record.run_id}.png"
    html_path = out_dir / f"{record.run_id}.html"
    write_bytes_atomically(png_path, png)
    write_text_atomically(html_path, render_html(record, png))
    return ReportFiles(png=png_path, html=html_path)
