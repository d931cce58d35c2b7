"""A NaN (or Inf) in the reference's output is a value the candidate must reproduce, never a
"don't care": a finite number where the reference has NaN fails, through both gates (eager's
tolerance and the float64 run), in a correctness trial and in a timed call's check.

Each test would pass a candidate that writes anything where the reference is not finite if the
comparison treated those places as matching (``ok`` taken from the tolerance alone, a NaN
difference read as "within", or a non-finite mismatch counted as tolerance-only so that the float64
gate, which looks at finite places only, rescues it).
"""

from __future__ import annotations

import pytest
import torch

from kevin_agent.evaluate.worker.correctness import (
    CorrectnessHarness,
    Fp64Reference,
    check_outputs,
    compare_output,
    run_correctness,
)

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("special", [NAN, INF, -INF])
@pytest.mark.parametrize("written", [0.0, 1.0, 1e30])
def test_a_finite_value_where_the_reference_is_not_finite_fails(special: float, written: float) -> None:
    expected = torch.tensor([1.0, special, 2.0, 3.0])
    got = expected.clone()
    got[1] = written
    check = compare_output(0, expected, got)
    assert check.problem is not None and check.mismatched == 1
    assert not check.tolerance_only  # so the float64 gate (finite places only) cannot rescue it


def test_a_reference_that_is_nan_everywhere_accepts_only_nan() -> None:
    expected = torch.full((8,), NAN)
    assert compare_output(0, expected, torch.full((8,), NAN)).problem is None
    assert compare_output(0, expected, torch.zeros(8)).mismatched == 8
    assert compare_output(0, expected.half(), torch.zeros(8).half()).problem is not None


def test_an_inf_must_have_its_sign() -> None:
    expected = torch.tensor([INF, -INF])
    assert compare_output(0, expected, torch.tensor([INF, -INF])).problem is None
    assert compare_output(0, expected, torch.tensor([-INF, INF])).mismatched == 2


class LogOfInput(torch.nn.Module):
    """NaN wherever the input is negative (about half the places), -inf at zero."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class NanToZero(torch.nn.Module):
    """The reference's values where they are finite, 0 where the reference has NaN or -inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(torch.log(x), nan=0.0, neginf=0.0)


def harness(candidate: torch.nn.Module) -> CorrectnessHarness:
    reference = LogOfInput()
    return CorrectnessHarness(
        reference=reference, candidate=candidate, get_inputs=lambda: [torch.randn(64, 64)], device="cpu",
        seed_all=torch.manual_seed, synchronize=lambda: None, poison=lambda: 0,
        reference64=Fp64Reference(reference))


def test_the_reference_itself_passes() -> None:
    result = run_correctness(harness(LogOfInput()), trials=2, base_seed=0)
    assert result.ok, result.message


def test_a_trial_fails_a_candidate_that_fills_the_references_nans() -> None:
    """Exact wherever the reference is finite: only the NaN/-inf places can fail it, and the
    float64 run (which agrees everywhere else) must not accept it."""
    result = run_correctness(harness(NanToZero()), trials=2, base_seed=0)
    assert not result.ok and not result.fp64_accepted
    assert "elements differ" in result.message


def test_a_timed_calls_check_fails_it_too() -> None:
    h = harness(NanToZero())
    torch.manual_seed(5)
    inputs = [torch.randn(64, 64)]
    assert check_outputs(h, inputs, LogOfInput()(*inputs), "timed call 1") == []
    problems = check_outputs(h, inputs, NanToZero()(*inputs), "timed call 1")
    assert problems and problems[0].endswith("(timed call 1)")
