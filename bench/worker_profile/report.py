"""Sum up a ``KEVIN_WORKER_PROFILE`` folder (see ``sitecustomize.py``): where each candidate job's
wall went (hand-over, the worker's stages, outside them, exit, judge) and the worker's cProfile
over every candidate job. ``python bench/worker_profile/report.py DIR [--top N]``."""

from __future__ import annotations

import argparse
import io
import json
import pstats
import statistics
from pathlib import Path

TOP_STAGES = ("reference", "baseline", "load", "correctness", "provenance", "timing")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def walls(folder: Path) -> str:
    rows: dict[str, list[float]] = {}
    count = 0
    for line in (folder / "parent.jsonl").read_text().splitlines():
        record = json.loads(line)
        worker = record.get("worker")
        if record.get("compile_ahead") or record.get("baseline") or not worker or "exit_seen" not in record:
            continue
        count += 1
        stages = record.get("stage_seconds", {})
        body = worker["run_job_end"] - worker["run_job_start"]
        staged = sum(stages.get(name, 0.0) for name in TOP_STAGES)
        parts = {
            "handed -> _run_job": worker["run_job_start"] - record["handed"],
            "_run_job (worker body)": body,
            "  of it in stages": staged,
            "  of it outside stages": body - staged,
            "reply written -> exit seen": record["exit_seen"] - record.get("reply_mtime", record["exit_seen"]),
            "_run_job end -> exit seen": record["exit_seen"] - worker["run_job_end"],
            "exit seen -> collected (judge)": record["collected"] - record["exit_seen"],
            "job seconds (the lane's)": record.get("seconds", float("nan")),
        }
        for name, seconds in stages.items():
            parts[f"stage {name}"] = seconds
        for name, seconds in parts.items():
            rows.setdefault(name, []).append(seconds)
    out = [f"{count} candidate jobs; medians (s):"]
    out += [f"  {name:<40} {_median(values):8.4f}  (sum {sum(values):7.3f})" for name, values in rows.items()]
    return "\n".join(out)


def profile(folder: Path, top: int) -> str:
    files = []
    for marks in folder.glob("*-kevin-marks.json"):
        record = json.loads(marks.read_text())
        prof = marks.with_name(marks.name.replace("kevin-marks.json", "kevin.prof"))
        if not record.get("compile_ahead") and not record.get("baseline") and prof.exists():
            files.append(str(prof))
    if not files:
        return "no profiles"
    text = io.StringIO()
    stats = pstats.Stats(*files, stream=text)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return f"cProfile over {len(files)} candidate jobs\n{text.getvalue()}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    print(walls(args.folder))
    print(profile(args.folder, args.top))


if __name__ == "__main__":
    main()
