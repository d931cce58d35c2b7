"""Correctness stage: the candidate against the reference on fresh random inputs.

Tolerances by output dtype (KEVIN.md): fp32/fp64 ``atol = rtol = 1e-4``, fp16/bf16 (and any float
of 2 bytes or fewer) ``1e-2``, integers and bools exact. An element passes when
``|got - expected| <= atol + rtol * |expected|``; NaN/Inf must sit exactly where the reference has
the same value. Per trial the candidate runs first (on poisoned memory), then the reference, then the
candidate again; each candidate run is on its own clone of the inputs, checked unchanged after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kevin_agent.evaluate.worker.guards import changed_inputs, snapshot

FP32_TOLERANCE = 1e-4
LOW_PRECISION_TOLERANCE = 1e-2


def tolerance_for(dtype: Any) -> tuple[float, float]:
    """``(atol, rtol)`` for an output dtype (a ``torch.dtype`` or its name, e.g. ``"float16"``)."""
    name = str(dtype).replace("torch.", "")
    if name in ("bool",) or name.startswith(("int", "uint")):
        return 0.0, 0.0
    if name.startswith("float8") or name in ("float16", "half", "bfloat16", "complex32"):
        return LOW_PRECISION_TOLERANCE, LOW_PRECISION_TOLERANCE
    return FP32_TOLERANCE, FP32_TOLERANCE


def trial_seed(base_seed: int, trial: int) -> int:
    """A different seed per correctness trial (never the construction seed)."""
    return base_seed + 1 + trial


@dataclass
class OutputCheck:
    """How one output of one candidate run compared with the reference."""

    index: int
    problem: str | None = None  # None: matched
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatched: int = 0
    total: int = 0
    atol: float = 0.0
    rtol: float = 0.0


def flatten_outputs(value: Any) -> list[Any]:
    """Leaves of a forward's result: a tensor, or nested tuples/lists of tensors and scalars."""
    if isinstance(value, (list, tuple)):
        leaves: list[Any] = []
        for item in value:
            leaves += flatten_outputs(item)
        return leaves
    return [value]


def describe_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def mismatch_text(check: OutputCheck, expected_desc: str, got_desc: str) -> str:
    """The numbers half of the model's mismatch message for one output."""
    return (
        f"output {check.index}: {check.mismatched} of {check.total} elements differ beyond "
        f"atol={check.atol:g}, rtol={check.rtol:g}; max abs error {check.max_abs_error:.4g}, "
        f"max rel error {check.max_rel_error:.4g} (expected {expected_desc}, got {got_desc})"
    )


def trial_label(trial: int, trials: int, run: str) -> str:
    """``"trial 2 of 5, first candidate run"``."""
    return f"trial {trial + 1} of {trials}, {run} candidate run"


def tensor_desc(tensor: Any) -> str:
    return f"{str(tensor.dtype).replace('torch.', '')} {describe_shape(tensor.shape)}"


def compare_output(index: int, expected: Any, got: Any) -> OutputCheck:
    """Compare one output leaf; ``problem`` says what is wrong in words for the model."""
    import torch

    if not isinstance(expected, torch.Tensor):
        if isinstance(got, torch.Tensor):
            return OutputCheck(index, f"output {index} is a tensor, expected {type(expected).__name__}")
        same = _scalar_close(expected, got)
        problem = None if same else f"output {index} is {got!r}, expected {expected!r}"
        return OutputCheck(index, problem, total=1, mismatched=0 if same else 1)
    if not isinstance(got, torch.Tensor):
        return OutputCheck(index, f"output {index} is {type(got).__name__}, expected a tensor ({tensor_desc(expected)})")
    atol, rtol = tolerance_for(expected.dtype)
    check = OutputCheck(index, atol=atol, rtol=rtol, total=expected.numel())
    if got.shape != expected.shape or got.dtype != expected.dtype:
        check.problem = f"output {index} has {tensor_desc(got)}, expected {tensor_desc(expected)}"
        return check
    if got.device != expected.device:
        check.problem = f"output {index} is on {got.device}, expected on {expected.device}"
        return check
    if expected.numel() == 0:
        return check
    exp, out = _comparable(expected.detach()), _comparable(got.detach())
    if not (exp.is_floating_point() or exp.is_complex()):
        check.mismatched = int((exp != out).sum().item())
        if check.mismatched:
            check.max_abs_error = float((exp.double() - out.double()).abs().max().item())
            check.problem = mismatch_text(check, tensor_desc(expected), tensor_desc(got))
        return check
    exp_finite, out_finite = torch.isfinite(exp), torch.isfinite(out)
    bad_nonfinite = int((exp_finite & ~out_finite).sum().item())
    diff = (out - exp).abs()
    both_finite = exp_finite & out_finite
    within = diff <= atol + rtol * exp.abs()
    same_special = (torch.isnan(exp) & torch.isnan(out)) | (~exp_finite & (out == exp))
    ok = torch.where(both_finite, within, same_special)
    check.mismatched = int((~ok).sum().item())
    if bool(both_finite.any().item()):
        check.max_abs_error = float(diff[both_finite].max().item())
        meaningful = both_finite & (exp.abs() > max(atol, 1e-12))
        if bool(meaningful.any().item()):
            check.max_rel_error = float((diff[meaningful] / exp.abs()[meaningful]).max().item())
    if bad_nonfinite:
        check.problem = (
            f"output {index} has {bad_nonfinite} NaN/Inf values where the reference is finite "
            f"(expected {tensor_desc(expected)}); this often means an output element was never written"
        )
    elif check.mismatched:
        check.problem = mismatch_text(check, tensor_desc(expected), tensor_desc(got))
    return check


def constant_problem(index: int, expected: Any, got: Any) -> str | None:
    """A constant (e.g. all-zero) output where the reference varies, even if within tolerance."""
    import torch

    if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
        return None
    if got.numel() < 2 or got.shape != expected.shape:
        return None
    flat_got, flat_exp = got.detach().reshape(-1), expected.detach().reshape(-1)
    got_constant = bool((flat_got == flat_got[0]).all().item())
    exp_constant = bool((flat_exp == flat_exp[0]).all().item())
    if got_constant and not exp_constant:
        value = flat_got[0].item()
        return (
            f"output {index} is constant (every element is {value:g}) while the reference's values "
            "vary; the kernel must compute the real result"
        )
    return None


def _comparable(tensor: Any) -> Any:
    import torch

    if tensor.is_floating_point() and tensor.dtype != torch.float64:
        return tensor.float()
    return tensor


def _scalar_close(expected: Any, got: Any) -> bool:
    if isinstance(expected, float) and isinstance(got, (int, float)):
        atol, rtol = tolerance_for("float32")
        return abs(got - expected) <= atol + rtol * abs(expected)
    try:
        return bool(expected == got)
    except Exception:
        return False


def to_device(value: Any, device: Any) -> Any:
    """Move tensors (nested in lists/tuples/dicts) to ``device``; other values unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


@dataclass
class CorrectnessResult:
    ok: bool
    message: str  # the mismatch description for the model when not ok
    trials_passed: int
    trials_total: int
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    atol: float | None = None
    rtol: float | None = None
    problems: list[str] = field(default_factory=list)
    patched: bool = False  # the failure is a patched timing/checking function


@dataclass
class CorrectnessHarness:
    """What a correctness run needs; every callable is the worker's captured original."""

    reference: Callable[..., Any]
    candidate: Callable[..., Any]
    get_inputs: Callable[[], Any]
    device: Any
    seed_all: Callable[[int], None]
    synchronize: Callable[[], None]
    poison: Callable[[], Any]
    check_patched: Callable[[], str | None] = lambda: None


def run_correctness(h: CorrectnessHarness, trials: int, base_seed: int) -> CorrectnessResult:
    """Run ``trials`` trials; stop at the first failing one. Candidate exceptions propagate."""
    result = CorrectnessResult(ok=True, message="", trials_passed=0, trials_total=trials)
    for trial in range(trials):
        h.seed_all(trial_seed(base_seed, trial))
        inputs = to_device(h.get_inputs(), h.device)
        problems = _one_trial(h, inputs, trial, trials, result)
        patched = h.check_patched()
        if patched:
            problems.insert(0, patched)
            result.patched = True
        if problems:
            result.ok = False
            result.problems = problems
            result.message = problems[0]
            return result
        result.trials_passed += 1
    return result


def _run_candidate(h: CorrectnessHarness, inputs: Any) -> tuple[Any, list[str]]:
    """Poison free memory, run the candidate on a clone; (output, names of inputs it changed)."""
    h.poison()
    candidate_inputs = snapshot(inputs)
    got = h.candidate(*candidate_inputs)
    h.synchronize()  # whole device: side-stream work is finished before anything is read
    return got, changed_inputs(inputs, candidate_inputs)


def _one_trial(
    h: CorrectnessHarness, inputs: Any, trial: int, trials: int, result: CorrectnessResult
) -> list[str]:
    """Candidate, reference, candidate again; the problems found (empty when all matched)."""
    import torch

    with torch.no_grad():
        first, first_changed = _run_candidate(h, inputs)
        reference_inputs = snapshot(inputs)
        expected = h.reference(*reference_inputs)
        h.synchronize()
        reference_changed = set(changed_inputs(inputs, reference_inputs))  # in-place tasks
        second, second_changed = _run_candidate(h, inputs)
    runs = (("first", first, first_changed), ("second", second, second_changed))
    for run, _, changed in runs:
        changed = [name for name in changed if name not in reference_changed]
        if changed:
            return [
                f"Your forward modified its inputs ({', '.join(changed)}) on "
                f"{trial_label(trial, trials, run)}; inputs must be left unchanged."
            ]
    expected_leaves = flatten_outputs(expected)
    problems: list[str] = []
    for run, got, _ in runs:
        got_leaves = flatten_outputs(got)
        where = trial_label(trial, trials, run)
        if len(got_leaves) != len(expected_leaves):
            problems.append(
                f"forward returned {len(got_leaves)} outputs, expected {len(expected_leaves)} ({where})"
            )
            continue
        for index, (exp, out) in enumerate(zip(expected_leaves, got_leaves)):
            check = compare_output(index, exp, out)
            result.max_abs_error = max(result.max_abs_error, check.max_abs_error)
            result.max_rel_error = max(result.max_rel_error, check.max_rel_error)
            if isinstance(exp, torch.Tensor):
                result.atol = max(result.atol or 0.0, check.atol)
                result.rtol = max(result.rtol or 0.0, check.rtol)
            problem = check.problem or constant_problem(index, exp, out)
            if problem:
                problems.append(f"{problem} ({where})")
    return problems
