"""First call against second call, in one fresh CUDA process, of what a worker's correctness
stage runs for each fixture task (issue 20: is a fresh worker paying for lazy kernel loading?).
``python bench/worker_profile/first_calls.py [--out FILE]``: one JSON line per step."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TASKS = ROOT / "tests" / "fixtures" / "kernels"


def _twice(step: Callable[[], Any], synchronize: Callable[[], None]) -> list[float]:
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        step()
        synchronize()
        seconds.append(round(time.perf_counter() - started, 5))
    return seconds


def task_rows(task_name: str, device: Any, sync: Callable[[], None]) -> list[dict[str, Any]]:
    """One fixture task's steps, each timed on its first and second call."""
    import torch

    from kevin_agent.evaluate.worker import correctness as c
    from kevin_agent.evaluate.worker.context import build_reference

    source = (TASKS / f"{task_name}_task.py").read_text()
    task, reference, _ = build_reference(source, Path(f"/tmp/first-calls-{task_name}.py"),
                                         f"first_calls_{task_name}", torch.manual_seed, 0, device)
    inputs = c.make_inputs(task.get_inputs, device)
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        expected = reference(*inputs)
        got = expected.clone()
        started = time.perf_counter()
        exact = c.Fp64Reference(reference)(inputs)
        sync()
        first_fp64 = round(time.perf_counter() - started, 5)
        rows.append({"task": task_name, "step": "fp64_reference(first)", "first_s": first_fp64})
        steps: dict[str, Callable[[], Any]] = {
            "reference": lambda: reference(*inputs),
            "plain_outputs": lambda: c.plain_outputs(got),
            "compare_output": lambda: c.compare_output(0, expected, got),
            "constant_problem": lambda: c.constant_problem(0, expected, got),
            "fp64_reference(new)": lambda: c.Fp64Reference(reference)(inputs),
            "judge_fp64": lambda: c.judge_fp64(expected, got, exact),
        }
        for name, step in steps.items():
            first, second = _twice(step, sync)
            rows.append({"task": task_name, "step": name, "first_s": first, "second_s": second})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", help="cpu: only to check this script")
    args = parser.parse_args()
    started = time.perf_counter()
    import torch

    device = torch.device(args.device)
    torch.empty(1, device=device)
    rows: list[dict[str, Any]] = [{"step": "import+context", "first_s": round(time.perf_counter() - started, 3)}]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for task_name in ("add", "gelu", "matmul", "softmax"):
        rows += task_rows(task_name, device, sync)
    text = "\n".join(json.dumps(row) for row in rows)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
