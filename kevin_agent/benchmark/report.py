"""The benchmark's faces: a table for the terminal, a JSON result, an HTML report with plots,
and two results side by side (``kevin bench compare``)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from kevin_agent.benchmark.metrics import Summary, TaskResult

# (JSON key path, column title, format) for the table and the comparison
COLUMNS: list[tuple[str, str, str]] = [
    ("tasks", "tasks", "{:d}"), ("correct", "correct", "{:.0%}"),
    ("fast_vs_eager.0", "fast_0", "{:.0%}"), ("fast_vs_eager.1", "fast_1", "{:.0%}"),
    ("fast_vs_eager.1.5", "fast_1.5", "{:.0%}"), ("fast_vs_compile.1", "fast_1 vs compile", "{:.0%}"),
    ("fast_vs_compile.1.5", "fast_1.5 vs compile", "{:.0%}"), ("geomean_speedup", "geomean", "{:.2f}x"),
    ("best_at_k", "best@k", "{:.2f}x"), ("avg_at_k", "avg@k", "{:.2f}x"),
    ("compile_error_share", "compile err", "{:.0%}"), ("provenance_rejection_share", "provenance rej", "{:.0%}"),
    ("untrusted_share", "untrusted", "{:.0%}"),
]


def value(row: dict[str, Any], key: str) -> Any:
    """``fast_vs_eager.1.5`` -> row["fast_vs_eager"]["1.5"]."""
    head, _, rest = key.partition(".")
    found = row.get(head)
    return found.get(rest) if rest and isinstance(found, dict) else found


def cell(row: dict[str, Any], key: str, fmt: str) -> str:
    found = value(row, key)
    return "-" if found is None else fmt.format(found)


def level_name(level: Optional[int]) -> str:
    return "all" if level is None else f"level {level}"


def provenance_note(results: Sequence[TaskResult]) -> Optional[str]:
    """Where the numbers were measured, when they were replayed from a recording."""
    if not any(r.replayed for r in results):
        return None
    from kevin_agent.data import REPLAY_GPU_NAME

    gpus = sorted({r.gpu_name for r in results if r.gpu_name and r.gpu_name != REPLAY_GPU_NAME})
    where = f"measured on {', '.join(gpus)}" if gpus else "recorded with no GPU named"
    return f"replayed verdicts: {where} elsewhere, not measured on this machine"


def measured_text(replayed: bool, gpus: Sequence[str]) -> str:
    """Where a result's numbers come from, in a few words: "measured on NVIDIA H100", or for
    recorded verdicts served again "replayed (recorded on NVIDIA H200)"."""
    from kevin_agent.data import REPLAY_GPU_NAME

    named = ", ".join(sorted({gpu for gpu in gpus if gpu and gpu != REPLAY_GPU_NAME}))
    if replayed:
        return f"replayed (recorded on {named})" if named else "replayed (recorded with no GPU named)"
    return f"measured on {named}" if named else "no GPU named"


def result_measured(result: dict[str, Any]) -> str:
    """``measured_text`` of a result, also of one written before results carried it."""
    if result.get("measured"):
        return str(result["measured"])
    return measured_text(bool(result.get("replayed")), str(result.get("gpu") or "").split(", "))


def table(result: dict[str, Any]) -> Any:
    """A rich table of the per-level and overall rows."""
    from rich.table import Table

    title = f"kevin bench {result['bench_id']} ({result['policy']} policy, {result['gpu'] or 'no GPU named'})"
    if result.get("replayed"):
        title += f"\n{result['replayed']}"
    if result.get("skipped"):
        names = ", ".join(task["name"] for task in result["skipped"])
        title += f"\n{len(result['skipped'])} skipped, not counted: {names}"
    grid = Table(title=title, title_justify="left")
    grid.add_column("level")
    for _, name, _ in COLUMNS:
        grid.add_column(name, justify="right")
    for row in result["summaries"]:
        grid.add_row(level_name(row["level"]), *(cell(row, key, fmt) for key, _, fmt in COLUMNS))
    return grid


def result_dict(bench_id: str, settings: dict[str, Any], results: Sequence[TaskResult],
                rows: Sequence[Summary], replies: str | None = None,
                skipped: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The JSON written by ``--json`` / ``--out``: settings, rows and every counted task's
    figures; ``replies``: the file of recorded replies re-judged (no model ran); ``skipped``: the
    tasks that could not be loaded (name, level, why), apart from the rows."""
    from dataclasses import asdict

    gpus = sorted({r.gpu_name for r in results if r.gpu_name})
    policies = sorted({r.policy for r in results if r.policy})  # as the stored runs resolved it
    return {
        "bench_id": bench_id, "settings": settings, "replies": replies,
        "policy": ", ".join(policies) or (settings.get("eval_flags") or {}).get("policy") or "unknown",
        "gpu": ", ".join(gpus) or None, "replayed": provenance_note(results),
        "measured": measured_text(any(r.replayed for r in results), gpus),
        "summaries": [row.to_dict() for row in rows], "tasks": [asdict(r) for r in results],
        "skipped": [dict(task) for task in skipped],
    }


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def plots(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(caption, base64 PNG): the speedup distribution and per-level bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speedups = [t["best_vs_eager"] for t in result["tasks"] if t["correct"]]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(speedups or [0.0], bins=20, color="#4c72b0")
    ax.axvline(1.0, color="#c44e52", linestyle="--", label="eager")
    ax.set(xlabel="best speedup vs eager (correct kernels)", ylabel="tasks", title="Speedup distribution")
    ax.legend()
    first = ("Speedup distribution", _png(fig))
    plt.close(fig)
    levels = [row for row in result["summaries"] if row["level"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [level_name(row["level"]) for row in levels]
    for offset, (key, label) in enumerate([("correct", "correct"), ("fast_vs_eager.1", "fast_1"),
                                           ("fast_vs_compile.1", "fast_1 vs compile")]):
        ax.bar([i + offset * 0.27 for i in range(len(names))], [100 * value(r, key) for r in levels],
               width=0.27, label=label)
    ax.set_xticks([i + 0.27 for i in range(len(names))], names)
    ax.set(ylabel="% of tasks", title="Per level", ylim=(0, 100))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    second = ("Per level", _png(fig))
    plt.close(fig)
    return [first, second]


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_report(result: dict[str, Any]) -> str:
    """A self-contained HTML page: settings, the table, the plots and every task."""
    summary = _html_table(["level", *(name for _, name, _ in COLUMNS)],
                          [[level_name(r["level"]), *(cell(r, k, f) for k, _, f in COLUMNS)]
                           for r in result["summaries"]])
    tasks = _html_table(["task", "run", "status", "candidates", "correct", "vs eager", "vs compile"],
                        [[t["name"], t["run_id"] or "-", t["status"], str(t["candidates"]),
                          "yes" if t["correct"] else "no", f"{t['best_vs_eager']:.2f}x",
                          f"{t['best_vs_compile']:.2f}x"] for t in result["tasks"]])
    figures = "".join(f'<figure><img alt="{html.escape(c)}" src="data:image/png;base64,{b}">'
                      f"<figcaption>{html.escape(c)}</figcaption></figure>" for c, b in plots(result))
    note = f'<p class="replayed">{html.escape(result["replayed"])}</p>' if result.get("replayed") else ""
    if result.get("skipped"):
        tasks += "<h2>Skipped (not counted)</h2>" + _html_table(
            ["task", "why"], [[t["name"], str(t["why"])] for t in result["skipped"]])
    title = html.escape(f"kevin bench {result['bench_id']}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child"
            "{text-align:left;white-space:nowrap}.replayed{color:#a33;font-weight:bold}figure{display:inline-block}"
            f"</style></head><body><h1>{title}</h1>{note}<p>{html.escape(settings_line(result))}</p>"
            f"{summary}{figures}<h2>Tasks</h2>{tasks}</body></html>")


def settings_line(result: dict[str, Any]) -> str:
    s = result["settings"]
    backend = s.get("backend_flags") or {}
    if result.get("replies"):  # no model ran: recorded output, judged again here
        played = f"recorded replies from {Path(result['replies']).name} re-judged, no model"
    else:
        played = (f"{s.get('trajectories')} trajectories x {s.get('turns')} turns; "
                  f"model {backend.get('model') or 'default'} ({backend.get('backend') or 'openai'})")
    return f"{result['policy']} policy; {played}; GPU {result['gpu'] or '-'}"


def _side(label: str, result: dict[str, Any]) -> str:
    note = f"; {result['note']}" if result.get("note") else ""
    return f"{label}: {result['bench_id']}, {result_measured(result)}{note}"


def comparison(a: dict[str, Any], b: dict[str, Any]) -> Any:
    """Two results side by side: each metric of each level either has, A, B and B - A; above it a
    line per side says where its numbers come from (replayed ones say so) and why one is empty."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    sides = [Text(_side("A", a)), Text(_side("B", b))]
    if not a["summaries"] and not b["summaries"]:
        return Group(*sides, Text("nothing to compare: neither benchmark has results"))
    grid = Table()
    for name in ("level", "metric", "A", "B", "B - A"):
        grid.add_column(name, justify="left" if name in ("level", "metric") else "right")
    rows_a = {row["level"]: row for row in a["summaries"]}
    rows_b = {row["level"]: row for row in b["summaries"]}
    levels = sorted({*rows_a, *rows_b} - {None}) + [None]
    for level in levels:
        row_a, row_b = rows_a.get(level), rows_b.get(level)
        for key, name, fmt in COLUMNS:
            va = value(row_a, key) if row_a else None
            vb = value(row_b, key) if row_b else None
            delta = "-" if va is None or vb is None else fmt.replace(":", ":+").format(vb - va)
            grid.add_row(level_name(level), name, "-" if va is None else fmt.format(va),
                         "-" if vb is None else fmt.format(vb), delta)
    return Group(*sides, grid)
