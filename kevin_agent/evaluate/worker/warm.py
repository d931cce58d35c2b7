"""The kernels a job's checks launch, loaded while a process is still a spare (issue 20).

CUDA loads a kernel's module on its first launch; in a fresh worker that cost lands on the first
job's correctness stage, inside the GPU's lease. One small run of each check on the device
(inputs copied in, clones, bit-identical input checks, both gates on a passing output, one off by
more than the tolerance and one with a NaN, the constant check, the input variants of later
trials) loads them before READY. The judge process runs the same.
"""

from __future__ import annotations

from typing import Any


def warm_checks(device: Any) -> None:
    """Run each check once on small tensors on ``device`` (a CUDA device or the CPU)."""
    import torch

    from kevin_agent.evaluate.worker.correctness import (
        compare_output,
        constant_problem,
        judge_fp64,
        plain_outputs,
        to_float64,
    )
    from kevin_agent.evaluate.worker.exercise import exercise
    from kevin_agent.evaluate.worker.guards import changed_inputs, snapshot

    expected = torch.randn(8, 8).to(device)  # inputs are made on the CPU, then copied over
    got = expected + 1e-6
    changed_inputs([expected], snapshot([expected]))
    plain_outputs((got,))
    nan = got.clone()
    nan[0, 0] = float("nan")
    for output in (got, expected + 1e-3, nan):
        compare_output(0, expected, output)
        judge_fp64(expected, output, to_float64(expected))
    constant_problem(0, expected, torch.zeros_like(expected))
    exercise([expected], "mixed-every-offset-scaled", 0)  # mixing, moving and the finiteness checks
    if device.type == "cuda":
        torch.cuda.synchronize(device)
