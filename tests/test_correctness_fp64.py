"""Correctness judged against float64 (issue 9, item 4), on CPU: a matmul with K = 4096 that sums in
another order passes though it fails eager's fixed 1e-4; the same matmul with TF32-rounded inputs,
bf16 inputs or fp16 accumulation fails; a product reduction at the floor of fp32 is not "constant";
eager's own error is reported next to the candidate's."""

from __future__ import annotations

import pytest
import torch

from kevin_agent.evaluate.worker.correctness import (
    CorrectnessHarness,
    Fp64Reference,
    compare_output,
    constant_problem,
    judge_fp64,
    run_correctness,
    to_float64,
)

M, K, N = 256, 4096, 256


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """What TF32 tensor cores do to fp32 inputs: keep 10 mantissa bits (round to nearest)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class SequentialMatMul(torch.nn.Module):
    """One fp32 accumulator per output, k = 0..K-1 in order: a naive CUDA kernel's summation."""

    def forward(self, a, b):
        acc = torch.zeros(a.shape[0], b.shape[1])
        for k in range(a.shape[1]):
            acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
        return acc


class ReversedBlocks(torch.nn.Module):
    """Blocks of 32 along K summed from the last block to the first."""

    def forward(self, a, b):
        acc = torch.zeros(a.shape[0], b.shape[1])
        for start in reversed(range(0, a.shape[1], 32)):
            acc = acc + a[:, start:start + 32] @ b[start:start + 32, :]
        return acc


class Tf32MatMul(torch.nn.Module):
    def forward(self, a, b):
        return round_to_tf32(a) @ round_to_tf32(b)


class Bf16Inputs(torch.nn.Module):
    def forward(self, a, b):
        return a.bfloat16().float() @ b.bfloat16().float()


class Fp16Accumulate(torch.nn.Module):
    def forward(self, a, b):
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
        for start in range(0, a.shape[1], 64):
            acc = (acc.float() + a[:, start:start + 64] @ b[start:start + 64, :]).half()
        return acc.float()


def matmul_harness(candidate, inputs=torch.randn, fp64=True) -> CorrectnessHarness:
    reference = MatMul()
    return CorrectnessHarness(
        reference=reference, candidate=candidate, get_inputs=lambda: [inputs(M, K), inputs(K, N)], device="cpu",
        seed_all=torch.manual_seed, synchronize=lambda: None, poison=lambda: 0,
        reference64=Fp64Reference(reference) if fp64 else None)


def test_other_summation_order_fails_eager_tolerance_but_passes_against_fp64():
    torch.manual_seed(3)
    a, b = torch.randn(M, K), torch.randn(K, N)
    assert compare_output(0, a @ b, SequentialMatMul()(a, b)).problem is not None  # the old false rejection
    for candidate in (SequentialMatMul(), ReversedBlocks()):
        result = run_correctness(matmul_harness(candidate), trials=2, base_seed=0)
        assert result.ok, result.message
        assert result.error_vs_fp64 is not None and result.reference_error_vs_fp64 is not None
        assert result.rms_error_vs_fp64 is not None and result.reference_rms_error_vs_fp64 is not None
        assert result.rms_error_vs_fp64 <= 10.0 * result.reference_rms_error_vs_fp64
    assert run_correctness(matmul_harness(SequentialMatMul()), trials=2, base_seed=0).fp64_accepted


def test_the_same_with_nonnegative_inputs():
    for candidate in (SequentialMatMul(), ReversedBlocks()):
        assert run_correctness(matmul_harness(candidate, torch.rand), trials=1, base_seed=0).ok


def test_lower_precision_fails_against_fp64():
    for candidate in (Tf32MatMul(), Bf16Inputs(), Fp16Accumulate()):
        result = run_correctness(matmul_harness(candidate), trials=1, base_seed=0)
        assert not result.ok, type(candidate).__name__
        assert "against a float64 run of the reference" in result.message
        assert "eager's own" in result.message and "TF32" in result.message


def test_gate_two_never_rejects_what_eager_tolerance_accepts():
    """Non-negative inputs: outputs ~K/4, so even TF32 stays inside rtol = 1e-4 (as it always did
    under the fixed tolerance); the float64 rule only rescues, it never adds a rejection."""
    result = run_correctness(matmul_harness(Tf32MatMul(), torch.rand), trials=1, base_seed=0)
    assert result.ok and not result.fp64_accepted


def test_without_a_fp64_run_the_fixed_tolerance_decides():
    result = run_correctness(matmul_harness(SequentialMatMul(), fp64=False), trials=1, base_seed=0)
    assert not result.ok and result.error_vs_fp64 is None


def test_first_trial_reports_eager_error_even_when_the_tolerance_passes():
    class Same(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    result = run_correctness(matmul_harness(Same()), trials=2, base_seed=0)
    assert result.ok and not result.fp64_accepted
    assert result.reference_error_vs_fp64 is not None and result.reference_error_vs_fp64 > 0
    assert result.error_vs_fp64 == result.reference_error_vs_fp64


def test_a_localised_bug_fails_even_when_the_rms_is_small():
    class OneWrongElement(torch.nn.Module):
        def forward(self, a, b):
            out = SequentialMatMul()(a, b)
            out[3, 5] += 1.0
            return out

    result = run_correctness(matmul_harness(OneWrongElement()), trials=1, base_seed=0)
    assert not result.ok and "1 elements beyond the allowance" in result.message


def test_reference_that_cannot_run_in_float64_falls_back():
    class Float32Only(torch.nn.Module):
        def forward(self, x):
            if x.dtype != torch.float32:
                raise TypeError("float32 only")
            return x * 3

    fp64 = Fp64Reference(Float32Only())
    assert fp64([torch.ones(4)]) is None and "float32 only" in fp64.note
    assert fp64([torch.ones(4)]) is None  # stays unavailable


def test_to_float64_keeps_integers_and_python_values():
    cast = to_float64([torch.ones(2), torch.arange(3), {"k": torch.ones(1, dtype=torch.float16)}, 7, True])
    assert cast[0].dtype == torch.float64 and cast[1].dtype == torch.int64
    assert cast[2]["k"].dtype == torch.float64 and cast[3] == 7 and cast[4] is True


def test_module_with_integer_buffers_runs_in_float64():
    class Counts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.tensor(3))
            self.weight = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return (x @ self.weight) * self.steps

    model = Counts()
    out = Fp64Reference(model)([torch.randn(2, 4)])
    assert out.dtype == torch.float64 and model.weight.dtype == torch.float32 and model.steps.dtype == torch.int64


def test_judge_fp64_needs_a_float64_output_of_the_same_shape():
    x = torch.randn(8)
    assert judge_fp64(x, x, x) is None  # float32 "reference": not a float64 run
    assert judge_fp64(x, x, x.double()[:4]) is None
    assert getattr(judge_fp64(x, x, x.double()), "ok", False)


def errors_of(multiple: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A well-scaled fp32 output (values 50..150) whose eager run is 1e-4 off float64 at every
    element (alternating signs, so its RMS error is 1e-4) and a candidate ``multiple`` x as far."""
    truth = torch.linspace(50.0, 150.0, 4096, dtype=torch.float64)
    signs = torch.ones(4096, dtype=torch.float64)
    signs[1::2] = -1.0
    eager = (truth + 1e-4 * signs).float()
    candidate = (truth + multiple * 1e-4 * signs).float()
    return eager, candidate, truth


@pytest.mark.parametrize("multiple,ok", [(5.0, True), (9.0, True), (11.0, False), (15.0, False)])
def test_fp64_gate_rms_boundary_is_ten_times_eagers_error(multiple, ok):
    """Fixed numbers: eager's RMS error 1e-4; allowed 10 x that + 1e-5 = 1.01e-3. Every element
    stays inside the per-element allowance (atol + rtol|x| + 20 x eager's max error, >= 2.1e-3), so
    only the RMS bound decides: 9e-4 passes, 1.1e-3 fails."""
    eager, candidate, truth = errors_of(multiple)
    check = judge_fp64(eager, candidate, truth)
    assert check is not None
    assert check.ok is ok, (check.rms_error, check.reference_rms_error)
    assert abs(check.reference_rms_error - 1e-4) < 2e-6
    if not ok:
        assert "against a float64 run of the reference" in (check.problem or "")


# ---------------------------------------------------------------- the constant-output guard


def test_product_reduction_at_the_floor_of_fp32_is_not_constant():
    """Products of 140 factors near 0.5 are ~2^-140: subnormal in fp32. A kernel that flushes
    subnormals to zero (or multiplies in another order) returns exact zeros, as right as eager."""
    torch.manual_seed(0)
    x = 0.5 * (1 + 0.01 * torch.rand(64, 140))
    expected = torch.prod(x, dim=1)
    assert (expected > 0).all() and (expected < torch.finfo(torch.float32).tiny).all()
    zeros = torch.zeros_like(expected)
    assert compare_output(0, expected, zeros).problem is None
    assert constant_problem(0, expected, zeros) is None


def test_tiny_but_ordinary_values_still_flag_a_constant():
    reference = torch.randn(64) * 1e-6
    assert "constant" in (constant_problem(0, reference, torch.zeros(64)) or "")


def test_reference_varying_beyond_the_tolerance_flags_a_constant_inside_it():
    reference = torch.linspace(0, 1.5e-4, 64)
    middle = torch.full((64,), 0.75e-4)
    assert compare_output(0, reference, middle).problem is None
    assert "constant" in (constant_problem(0, reference, middle) or "")


# ---------------------------------------------------------------- the output's scale bounds gate 2 (issue 19)


def test_fp64_rms_bound_fixed_numbers():
    from kevin_agent.evaluate.worker.correctness import fp64_rms_bound

    # well conditioned (a K=4096 matmul: outputs ~64, eager's RMS error 1e-5): 10x eager's error
    assert fp64_rms_bound(1e-5, 64.0, 1e-4, 1e-4) == pytest.approx(1e-4 + 1e-5)
    # ill conditioned (outputs ~1e-3, eager's own error 1e-2 from cancellation): 2x eager's, not 10x
    assert fp64_rms_bound(1e-2, 1e-3, 1e-4, 1e-4) == pytest.approx(2e-2 + 1e-5)
    # in between: the scale decides (outputs ~1, eager 1e-3: atol + 10 * rtol * 1 = 1.1e-3)
    assert fp64_rms_bound(1e-3, 1.0, 1e-4, 1e-4) == pytest.approx(2e-3 + 1e-5)
    assert fp64_rms_bound(2e-4, 1.0, 1e-4, 1e-4) == pytest.approx(1.1e-3 + 1e-5)


def test_an_ill_conditioned_reference_does_not_widen_gate_two():
    """Eager's own error (RMS 1e-2) dwarfs the outputs (RMS 1e-3): 5x eager's error used to pass
    the 10x rule; against the output's scale it is far too large."""
    from kevin_agent.evaluate.worker.correctness import judge_fp64

    gen = torch.Generator().manual_seed(7)
    truth = 1e-3 * torch.randn(4096, generator=gen, dtype=torch.float64)
    eager = (truth + 1e-2 * torch.randn(4096, generator=gen, dtype=torch.float64)).float()
    five_times = (truth + 5e-2 * torch.randn(4096, generator=gen, dtype=torch.float64)).float()
    judged = judge_fp64(eager, five_times, truth)
    assert judged is not None and not judged.ok, judged
    like_eager = (truth + 1e-2 * torch.randn(4096, generator=gen, dtype=torch.float64)).float()
    again = judge_fp64(eager, like_eager, truth)
    assert again is not None and again.ok  # another order, eager's own error: still passes


# ---------------------------------------------------------------- outputs: exact torch.Tensor, dense, copied


class _LyingTensor(torch.Tensor):
    """An output whose operators the candidate wrote: every comparison says "equal"."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        if isinstance(result, torch.Tensor) and result.dtype == torch.bool:
            with torch._C.DisableTorchFunctionSubclass():
                return torch.ones(tuple(result.shape), dtype=torch.bool)
        return result


class _Returns(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, a, b):
        return self.make(a, b)


@pytest.mark.parametrize("make, why", [
    (lambda a, b: torch.zeros(M, N).as_subclass(_LyingTensor), "tensor subclass"),
    (lambda a, b: (a @ b).to_sparse(), "not a dense tensor"),
    (lambda a, b: {"out": a @ b}, "not a tensor"),
    (lambda a, b: [a @ b, "text"], "output[1] is a builtins.str"),
])
def test_outputs_that_are_not_plain_dense_tensors_are_refused(make, why):
    result = run_correctness(matmul_harness(_Returns(make)), 1, 0)
    assert not result.ok and why in result.message, result.message


def test_a_tensor_subclass_that_would_pass_as_zeros_is_refused_not_compared():
    from kevin_agent.evaluate.worker.correctness import compare_output

    lying = torch.zeros(4).as_subclass(_LyingTensor)
    assert compare_output(0, torch.ones(4), lying).problem is None  # what the subclass could do unchecked
    assert run_correctness(matmul_harness(_Returns(lambda a, b: torch.zeros(M, N).as_subclass(_LyingTensor))),
                           1, 0).trials_passed == 0


def test_outputs_are_private_copies():
    from kevin_agent.evaluate.worker.correctness import plain_outputs

    kept = torch.arange(6.0).reshape(2, 3).t()  # not contiguous
    copied, problem = plain_outputs((kept, 3))
    assert problem is None and copied[1] == 3 and copied[0].is_contiguous()
    kept.add_(100.0)  # the candidate changes what it returned, later
    assert torch.equal(copied[0], torch.arange(6.0).reshape(2, 3).t())
    param, _ = plain_outputs(torch.nn.Parameter(torch.ones(2)))
    assert type(param) is torch.Tensor and not param.requires_grad


def test_torchs_named_results_are_plain_tuples():
    from kevin_agent.evaluate.worker.correctness import plain_outputs

    copied, problem = plain_outputs(torch.max(torch.randn(3, 4), dim=1))
    assert problem is None and type(copied) is tuple and len(copied) == 2
