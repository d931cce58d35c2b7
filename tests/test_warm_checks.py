"""The checks' kernels are loaded while a worker or judge is a spare (issue 20): ``warm_checks``
runs every check of a job once, on a passing output and two failing ones, here on the CPU (on the GPU
the same calls load the CUDA kernels; bench/results show the correctness stage's parts)."""

from __future__ import annotations

from typing import Any

import torch

from kevin_agent.evaluate.worker import correctness
from kevin_agent.evaluate.worker.warm import warm_checks


def test_every_check_runs_on_a_passing_and_two_failing_outputs(monkeypatch):
    seen: dict[str, list[Any]] = {}

    def recording(name: str):
        real = getattr(correctness, name)

        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            seen.setdefault(name, []).append(result)
            return result

        monkeypatch.setattr(correctness, name, call)

    for name in ("compare_output", "judge_fp64", "constant_problem", "plain_outputs", "to_float64"):
        recording(name)
    warm_checks(torch.device("cpu"))
    problems = [check.problem or "" for check in seen["compare_output"]]
    assert len(problems) == 3 and problems[0] == ""
    assert "differ beyond" in problems[1] and "NaN" in problems[2]
    gates = seen["judge_fp64"]
    assert len(gates) == 3 and all(gate is not None for gate in gates)
    assert seen["constant_problem"][0] is not None  # an all-zero output where the reference varies
    assert seen["plain_outputs"][0][1] is None and len(seen["to_float64"]) == 3


def test_the_input_variants_run_too(monkeypatch):
    from kevin_agent.evaluate.worker import exercise

    varied: list[Any] = []
    real = exercise.exercise
    monkeypatch.setattr(exercise, "exercise", lambda *args: varied.append(real(*args)))
    warm_checks(torch.device("cpu"))
    assert len(varied) == 1 and varied[0] is not None  # the 8 x 8 tensor was mixed, moved and scaled


def test_the_judge_warms_with_the_same_checks(monkeypatch):
    from kevin_agent.evaluate import judge

    calls: list[torch.device] = []
    monkeypatch.setattr("kevin_agent.evaluate.worker.warm.warm_checks", calls.append)
    judge.warm_up(torch.device("cpu"))
    assert calls == [torch.device("cpu")]
