"""Correctness stage: the candidate against the reference on fresh random inputs.

Two gates per floating output, the first that passes decides (``compare_output``, ``judge_fp64``):

1. **Eager's tolerance** (KEVIN.md): fp32/fp64 ``atol = rtol = 1e-4``, fp16/bf16 (and any float of
   2 bytes or fewer) ``1e-2``; an element passes when ``|got - expected| <= atol + rtol * |expected|``.
2. **Against float64** (what PyTorch's own accuracy checker, ``torch._dynamo.utils.same`` with an
   fp64 reference, does): the reference is run again in float64 (a deep copy ``.double()``,
   floating inputs cast), and the candidate passes when its error against that run is within a
   small multiple of eager's own error against it: RMS error at most ``FP64_RMS_MULTIPLIER`` x
   eager's (+ ``FP64_RMS_FLOOR``), and every element within ``atol + rtol * |fp64|`` plus
   ``FP64_MAX_MULTIPLIER`` x eager's largest error. A kernel that sums in another order lands near
   eager's own error; lower precision smuggled in (TF32 inputs, fp16 accumulation) lands one to
   three orders of magnitude above it.

Integers and bools are exact; NaN/Inf must sit exactly where the reference has the same value.
Per trial the candidate runs first (on poisoned memory), then the reference, then the candidate
again; each candidate run is on its own clone of the inputs, checked unchanged after. The float64
run happens on the first trial (to report eager's own error) and on any trial where gate 1 fails.
Trial 1 runs on plain ``get_inputs()``; later trials on the task's inputs mixed so that they
correlate, or offset and scaled (``exercise``), where independent noise would hide dropped terms.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kevin_agent.data import FP32_TOLERANCE, LOW_PRECISION_TOLERANCE
from kevin_agent.evaluate.judgement import trial_seed as trial_seed  # the parent checks the judge by these seeds
from kevin_agent.evaluate.worker.exercise import PLAIN as PLAIN_INPUTS
from kevin_agent.evaluate.worker.exercise import exercised
from kevin_agent.evaluate.worker.guards import changed_inputs, snapshot

# Gate 2 (against float64). Measured on CPU for an fp32 matmul with K = 4096: a fully sequential
# sum has 3.3x (randn inputs) to 8.6x (rand inputs) the RMS error of the blocked BLAS eager uses,
# a reversed blocked sum 0.7-1.5x; TF32 inputs 56x (rand) to 840x (randn), bf16 inputs and fp16
# accumulation 450x and more. dynamo uses 2-3x for compiled-vs-eager (same algorithms); a
# hand-written kernel may change the summation order more radically, hence 10.
FP64_RMS_MULTIPLIER = 10.0
FP64_MAX_MULTIPLIER = 20.0  # the largest elementwise error moves more than the RMS between orders
FP64_RMS_FLOOR = 1e-5  # absolute, as dynamo's tol / 10: eager exact to the last bit is no bar
# The output's scale also bounds gate 2 (issue 19): where eager's own error is large next to the
# output's RMS (an ill-conditioned reference: cancellation), 10x that error would be a large
# absolute error. The RMS allowance is then at most ``atol + FP64_SCALE_MULTIPLIER * rtol *
# RMS(fp64)``, but never below ``FP64_ILL_CONDITIONED_MULTIPLIER`` x eager's own RMS error (a
# different order of the same algorithm lands near eager's own error, as dynamo's 2x assumes).
FP64_SCALE_MULTIPLIER = 10.0
FP64_ILL_CONDITIONED_MULTIPLIER = 2.0
PLAIN_SCALARS = (int, float, bool, complex, type(None))


def tolerance_for(dtype: Any) -> tuple[float, float]:
    """``(atol, rtol)`` for an output dtype (a ``torch.dtype`` or its name, e.g. ``"float16"``)."""
    name = str(dtype).replace("torch.", "")
    if name in ("bool",) or name.startswith(("int", "uint")):
        return 0.0, 0.0
    if name.startswith("float8") or name in ("float16", "half", "bfloat16", "complex32"):
        return LOW_PRECISION_TOLERANCE, LOW_PRECISION_TOLERANCE
    return FP32_TOLERANCE, FP32_TOLERANCE


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
    tolerance_only: bool = False  # failed only by the tolerance (shapes, dtypes, NaN/Inf positions fine)


@dataclass
class Fp64Check:
    """One floating output against the float64 run of the reference (gate 2)."""

    ok: bool
    max_error: float  # the candidate's largest |got - fp64|
    rms_error: float
    reference_max_error: float  # eager's own: |expected - fp64|
    reference_rms_error: float
    problem: str | None = None


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
        return OutputCheck(index, f"output {index} is {type(got).__name__}, "
                                  f"expected a tensor ({tensor_desc(expected)})")
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
        check.tolerance_only = not bool((~ok & ~both_finite).any().item())  # only finite values differ
        check.problem = mismatch_text(check, tensor_desc(expected), tensor_desc(got))
    return check


def judge_fp64(expected: Any, got: Any, expected64: Any) -> Fp64Check | None:
    """Gate 2 for one floating output: the candidate's error against the float64 run within a small
    multiple of eager's own. None when ``expected64`` is not a usable float64 run of this output."""
    import torch

    usable = (isinstance(expected64, torch.Tensor) and expected64.dtype == torch.float64
              and isinstance(expected, torch.Tensor) and expected.is_floating_point()
              and isinstance(got, torch.Tensor) and expected64.shape == expected.shape == got.shape)
    if not usable:
        return None
    truth = expected64.detach().to(device=got.device)
    eager, mine = expected.detach().double(), got.detach().double()
    finite = torch.isfinite(truth) & torch.isfinite(eager) & torch.isfinite(mine)
    if not bool(finite.any().item()):
        return None
    truth, eager, mine = truth[finite], eager[finite], mine[finite]
    ref_err, err = (eager - truth).abs(), (mine - truth).abs()
    ref_max, ref_rms = float(ref_err.max().item()), float(ref_err.square().mean().sqrt().item())
    cand_max, cand_rms = float(err.max().item()), float(err.square().mean().sqrt().item())
    atol, rtol = tolerance_for(expected.dtype)
    allowed = atol + rtol * truth.abs() + FP64_MAX_MULTIPLIER * ref_max
    outside = int((err > allowed).sum().item())
    rms_bound = fp64_rms_bound(ref_rms, float(truth.square().mean().sqrt().item()), atol, rtol)
    check = Fp64Check(outside == 0 and cand_rms <= rms_bound, cand_max, cand_rms, ref_max, ref_rms)
    if not check.ok:
        check.problem = (f"against a float64 run of the reference its RMS error is {cand_rms:.3g} (eager's own "
                         f"{ref_rms:.3g}, at most {FP64_RMS_MULTIPLIER:g}x that allowed) and its max error "
                         f"{cand_max:.3g} (eager's own {ref_max:.3g}); {outside} elements beyond the allowance, "
                         "more than a different summation order explains (lower precision such as TF32 or "
                         "fp16 accumulation, or a bug)")
    return check


def fp64_rms_bound(reference_rms: float, scale_rms: float, atol: float, rtol: float) -> float:
    """Gate 2's RMS allowance: ``FP64_RMS_MULTIPLIER`` x eager's own RMS error against float64,
    capped by the output's scale (``atol + FP64_SCALE_MULTIPLIER * rtol * scale_rms``) but never
    below ``FP64_ILL_CONDITIONED_MULTIPLIER`` x eager's own; plus ``FP64_RMS_FLOOR``."""
    by_scale = atol + FP64_SCALE_MULTIPLIER * rtol * scale_rms
    multiple = min(FP64_RMS_MULTIPLIER * reference_rms,
                   max(FP64_ILL_CONDITIONED_MULTIPLIER * reference_rms, by_scale))
    return multiple + FP64_RMS_FLOOR


def plain_outputs(value: Any, path: str = "output") -> tuple[Any, str | None]:
    """A private copy of a forward's result, or why it is refused (issue 19). Tensors must be
    exactly ``torch.Tensor`` (a subclass could bring its own operators into the comparison; an
    ``nn.Parameter`` is read as its data), dense (strided layout, not sparse, nested, meta or
    quantized), and are copied contiguous with conjugate/negative bits resolved, so nothing the
    candidate keeps can change them later. Containers must be plain lists or tuples, other leaves
    plain Python scalars."""
    import torch

    kind = type(value)
    if kind in (list, tuple) or isinstance(value, tuple) and kind.__module__ == "torch.return_types":
        kind = list if kind is list else tuple  # torch's named results (torch.max(x, 1)) read as tuples
        copied = []
        for index, item in enumerate(value):
            plain, problem = plain_outputs(item, f"{path}[{index}]")
            if problem:
                return None, problem
            copied.append(plain)
        return kind(copied), None
    if kind in PLAIN_SCALARS:
        return value, None
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        what = "a tensor subclass" if isinstance(value, torch.Tensor) else "not a tensor"
        return None, (f"{path} is a {kind.__module__}.{kind.__qualname__} ({what}); return plain torch.Tensor "
                      "outputs (lists or tuples of them for several outputs)")
    if value.layout != torch.strided or value.is_nested or value.is_meta or value.is_quantized:
        return None, f"{path} is not a dense tensor (layout {value.layout}); return a dense strided tensor"
    return value.detach().resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format), None


def constant_problem(index: int, expected: Any, got: Any) -> str | None:
    """A constant (e.g. all-zero) output where the reference varies, even if within tolerance.

    Not when the reference itself sits at the floor of its dtype: its values vary by less than the
    tolerance and all lie within one mantissa width of the smallest normal number (a product
    reduction that underflows; one more factor of their size would flush them to zero, and a
    kernel whose order of multiplication or flush-to-zero gives exactly zero is as right as eager).
    Tiny but ordinary values (1e-6 * randn in fp32) still count: zeros there are a hack."""
    import torch

    if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
        return None
    if got.numel() < 2 or got.shape != expected.shape:
        return None
    flat_got, flat_exp = got.detach().reshape(-1), expected.detach().reshape(-1)
    got_constant = bool((flat_got == flat_got[0]).all().item())
    exp_constant = bool((flat_exp == flat_exp[0]).all().item())
    if got_constant and not exp_constant and _varies_beyond_tolerance(flat_exp):
        value = flat_got[0].item()
        return (
            f"output {index} is constant (every element is {value:g}) while the reference's values "
            "vary; the kernel must compute the real result"
        )
    return None


def _varies_beyond_tolerance(flat: Any) -> bool:
    """False only for a reference at its dtype's floor (see ``constant_problem``): finite values
    spread by at most ``atol + rtol * max|value|`` and all below ``finfo.tiny / finfo.eps``."""
    import torch

    if not flat.is_floating_point():
        return True
    values = flat.double()
    values = values[torch.isfinite(values)]
    if values.numel() < 2:
        return True  # NaN/Inf everywhere but one place: leave it to the comparison
    atol, rtol = tolerance_for(flat.dtype)
    largest = float(values.abs().max().item())
    spread = float((values.max() - values.min()).item())
    info = torch.finfo(flat.dtype)
    return spread > atol + rtol * largest or largest > info.tiny / info.eps


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


def make_inputs(get_inputs: Callable[[], Any], device: Any) -> Any:
    """The task's ``get_inputs()`` with its tensors made on ``device`` (factory calls under
    ``torch.device``): made on the host, one 16M-element ``randn`` costs ~0.08 s (measured on a
    2-core CI machine) and a candidate's stages make ~10 input sets. Made on the host and moved
    when the task's code fails that way (host-only calls such as ``.numpy()``)."""
    import torch

    try:
        with torch.device(device):
            return to_device(get_inputs(), device)
    except Exception:
        return to_device(get_inputs(), device)


def trial_inputs(get_inputs: Callable[[], Any], reference: Callable[..., Any], device: Any,
                 seed_all: Callable[[int], object], seed: int, base_seed: int) -> tuple[Any, str]:
    """(the inputs of the checked call seeded ``seed`` in a run with ``base_seed``, what they are):
    plain ``get_inputs()`` for trial 1 and any seed that is no trial's, a variant that exercises
    the computation for later trials (``exercise``). The one way both the worker's correctness
    trials and the judge make a checked call's inputs, so the two always agree."""
    seed_all(seed)
    return exercised(make_inputs(get_inputs, device), reference, device, seed, base_seed)


@dataclass
class CorrectnessResult:
    ok: bool
    message: str  # the mismatch description for the model when not ok
    trials_passed: int
    trials_total: int
    max_abs_error: float = 0.0  # against eager (the reference in its own precision)
    max_rel_error: float = 0.0
    atol: float | None = None
    rtol: float | None = None
    problems: list[str] = field(default_factory=list)
    patched: bool = False  # the failure is a patched timing/checking function
    # against the float64 run (None: never computed, or not usable for this task)
    error_vs_fp64: float | None = None
    reference_error_vs_fp64: float | None = None
    rms_error_vs_fp64: float | None = None
    reference_rms_error_vs_fp64: float | None = None
    fp64_accepted: bool = False  # some output passed only by gate 2
    fp64_note: str = ""  # why no float64 run was available, when it was needed
    input_sets: list[str] = field(default_factory=list)  # what each trial ran on (``trial_inputs``)

    def add_fp64(self, check: Fp64Check) -> None:
        self.error_vs_fp64 = max(self.error_vs_fp64 or 0.0, check.max_error)
        self.rms_error_vs_fp64 = max(self.rms_error_vs_fp64 or 0.0, check.rms_error)
        self.reference_error_vs_fp64 = max(self.reference_error_vs_fp64 or 0.0, check.reference_max_error)
        self.reference_rms_error_vs_fp64 = max(self.reference_rms_error_vs_fp64 or 0.0, check.reference_rms_error)


class Fp64Reference:
    """The reference run again in float64: a deep copy ``.double()`` (floating parameters and
    buffers only), on inputs whose floating tensors are cast (integers, bools and Python values
    unchanged). Built on first use; any failure makes it unavailable for the rest of the job."""

    def __init__(self, reference: Any) -> None:
        self.reference = reference
        self.model: Any = None
        self.note = ""

    def __call__(self, inputs: Any) -> Any:
        import copy

        import torch

        if self.note:
            return None
        try:
            if self.model is None:
                if not isinstance(self.reference, torch.nn.Module):
                    raise TypeError("the reference is not an nn.Module")
                self.model = copy.deepcopy(self.reference).double()
            with torch.no_grad():
                return self.model(*to_float64(snapshot(inputs)))
        except Exception as exc:  # not every module runs in float64: fall back to gate 1 alone
            self.note = f"no float64 run of the reference ({type(exc).__name__}: {str(exc)[:200]})"
            self.model = None
            return None


def to_float64(value: Any) -> Any:
    """Floating tensors (nested in lists/tuples/dicts) cast to float64 (complex to complex128)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.double()
        return value.to(torch.complex128) if value.is_complex() else value
    if isinstance(value, (list, tuple)):
        return type(value)(to_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: to_float64(v) for k, v in value.items()}
    return value


@dataclass
class CorrectnessHarness:
    """What a correctness run needs; every callable is the worker's captured original."""

    reference: Callable[..., Any]
    candidate: Callable[..., Any]
    get_inputs: Callable[[], Any]
    device: Any
    seed_all: Callable[[int], object]  # torch.manual_seed returns its generator
    synchronize: Callable[[], None]
    poison: Callable[[], Any]
    check_patched: Callable[[], str | None] = lambda: None
    reference64: Callable[[Any], Any] | None = None  # inputs -> the reference's float64 output (gate 2)
    witness: Callable[[int, str, list[Any]], None] | None = None  # (seed, label, output leaves) for the judge
    parts: dict[str, float] | None = None  # seconds per part of the trials (``part``'s names), when asked
    clock: Callable[[], float] = time.perf_counter

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the block's seconds to ``parts[name]`` (nothing when no breakdown was asked)."""
        if self.parts is None:
            yield
            return
        started = self.clock()
        try:
            yield
        finally:
            self.parts[name] = self.parts.get(name, 0.0) + self.clock() - started


def run_correctness(h: CorrectnessHarness, trials: int, base_seed: int) -> CorrectnessResult:
    """Run ``trials`` trials; stop at the first failing one. Candidate exceptions propagate. Trial 1
    is on plain ``get_inputs()``, later ones on variants that exercise the computation
    (``trial_inputs``, which the judge uses too)."""
    result = CorrectnessResult(ok=True, message="", trials_passed=0, trials_total=trials)
    for trial in range(trials):
        seed = trial_seed(base_seed, trial)
        with h.part("inputs"):
            inputs, what = trial_inputs(h.get_inputs, h.reference, h.device, h.seed_all, seed, base_seed)
            result.input_sets.append(what)
        problems = _one_trial(h, inputs, (trial, seed), trials, result)
        patched = h.check_patched()
        if patched:
            problems.insert(0, patched)
            result.patched = True
        if problems:
            result.ok = False
            result.problems = problems
            result.message = problems[0] if what == PLAIN_INPUTS else f"{problems[0]}; that trial's inputs: {what}"
            return result
        result.trials_passed += 1
    return result


class RefusedOutput(Exception):
    """The forward's result is not plain dense tensors (``plain_outputs`` says why)."""


def _run_candidate(h: CorrectnessHarness, inputs: Any) -> tuple[Any, list[str]]:
    """Poison free memory, run the candidate on a clone; (a private copy of its output, names of
    inputs it changed). Raises ``RefusedOutput`` for an output that is not plain dense tensors."""
    with h.part("poison"):
        h.poison()
    with h.part("candidate"):
        candidate_inputs = snapshot(inputs)
        got = h.candidate(*candidate_inputs)
        h.synchronize()  # whole device: side-stream work is finished before anything is read
    with h.part("copy"):
        plain, problem = plain_outputs(got)
        if problem:
            raise RefusedOutput(problem)
        h.synchronize()
        return plain, changed_inputs(inputs, candidate_inputs)


def _one_trial(
    h: CorrectnessHarness, inputs: Any, trial_and_seed: tuple[int, int], trials: int, result: CorrectnessResult
) -> list[str]:
    """Candidate, reference, candidate again; the problems found (empty when all matched). Both
    candidate runs' outputs go to the witness (the judge outside the process checks them again)."""
    import torch

    trial, seed = trial_and_seed
    with torch.no_grad():
        try:
            first, first_changed = _run_candidate(h, inputs)
        except RefusedOutput as refused:
            return [f"{refused} ({trial_label(trial, trials, 'first')})"]
        with h.part("reference"):
            reference_inputs = snapshot(inputs)
            expected = h.reference(*reference_inputs)
            h.synchronize()
            reference_changed = set(changed_inputs(inputs, reference_inputs))  # in-place tasks
        try:
            second, second_changed = _run_candidate(h, inputs)
        except RefusedOutput as refused:
            return [f"{refused} ({trial_label(trial, trials, 'second')})"]
    runs = (("first", first, first_changed), ("second", second, second_changed))
    if h.witness is not None:
        with h.part("witness"):
            for run, got, _ in runs:
                h.witness(seed, trial_label(trial, trials, run), flatten_outputs(got))
    for run, _, changed in runs:
        changed = [name for name in changed if name not in reference_changed]
        if changed:
            return [
                f"Your forward modified its inputs ({', '.join(changed)}) on "
                f"{trial_label(trial, trials, run)}; inputs must be left unchanged."
            ]
    with h.part("compare"):
        return _compare_runs(h, inputs, expected, runs, (trial, trials), result)


def _compare_runs(h: CorrectnessHarness, inputs: Any, expected: Any, runs: Sequence[tuple[str, Any, Any]],
                  trial_of: tuple[int, int], result: CorrectnessResult) -> list[str]:
    """Each candidate run's outputs against the reference's (both gates); the problems found."""
    trial, trials = trial_of
    expected_leaves = flatten_outputs(expected)
    fp64 = _Fp64Leaves(h, inputs, len(expected_leaves), wanted=trial == 0)
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
            problem = _check_leaf(index, exp, out, fp64, result)
            if problem:
                problems.append(f"{problem} ({where})")
    return problems


def check_outputs(h: CorrectnessHarness, inputs: Any, got: Any, where: str,
                  select: Callable[[int, Any], Any] | None = None) -> list[str]:
    """A kept output of a timed call (a private copy) against the reference on the same inputs:
    both gates, as in a correctness trial; the problems found. ``select(index, leaf)`` narrows each
    reference leaf (and its float64 run) to what ``got`` holds of it (the judge's sampled leaves)."""
    import torch

    with torch.no_grad():
        expected = h.reference(*snapshot(inputs))
    h.synchronize()
    expected_leaves, got_leaves = flatten_outputs(expected), flatten_outputs(got)
    if len(got_leaves) != len(expected_leaves):
        return [f"forward returned {len(got_leaves)} outputs, expected {len(expected_leaves)} ({where})"]
    if select is not None:
        expected_leaves = [select(index, leaf) for index, leaf in enumerate(expected_leaves)]
    result = CorrectnessResult(ok=True, message="", trials_passed=0, trials_total=0)
    fp64 = _Fp64Leaves(h, inputs, len(expected_leaves), wanted=False, select=select)
    problems = []
    for index, (exp, out) in enumerate(zip(expected_leaves, got_leaves, strict=True)):
        problem = _check_leaf(index, exp, out, fp64, result)
        if problem:
            problems.append(f"{problem} ({where})")
    return problems


def refill_inputs(staging: Any, source: Any) -> Any:
    """``source`` copied into ``staging``'s tensors (same shapes); the call's arguments."""
    import torch

    if isinstance(staging, torch.Tensor) and isinstance(source, torch.Tensor) and staging.shape == source.shape \
            and staging.dtype == source.dtype:
        return staging.copy_(source)
    if isinstance(staging, (list, tuple)) and isinstance(source, (list, tuple)) and len(staging) == len(source):
        return type(source)(refill_inputs(a, b) for a, b in zip(staging, source, strict=True))
    return snapshot(source)  # a Python value, or a tensor of another shape: a fresh copy


def keep_output(output: Any) -> Any:
    """A private copy of a timed call's output; raises ``RefusedOutput`` when it is not plain."""
    plain, problem = plain_outputs(output)
    if problem:
        raise RefusedOutput(problem)
    return plain


class _Fp64Leaves:
    """The float64 run's output leaves for one trial, computed at most once and only when asked
    (or on the first trial, so that eager's own error is reported)."""

    def __init__(self, h: CorrectnessHarness, inputs: Any, count: int, wanted: bool,
                 select: Callable[[int, Any], Any] | None = None) -> None:
        self.h, self.inputs, self.count, self.select = h, inputs, count, select
        self.leaves: list[Any] | None = None
        self.done = False
        if wanted:
            self.get()

    def get(self) -> list[Any] | None:
        if not self.done:
            self.done = True
            out = self.h.reference64(self.inputs) if self.h.reference64 is not None else None
            self.h.synchronize()
            leaves = flatten_outputs(out) if out is not None else None
            self.leaves = leaves if leaves is not None and len(leaves) == self.count else None
        return self.leaves

    def leaf(self, index: int, required: bool) -> Any:
        if not required and not self.done:
            return None
        leaves = self.get()
        if leaves is None:
            return None
        return self.select(index, leaves[index]) if self.select is not None else leaves[index]


def _check_leaf(index: int, exp: Any, out: Any, fp64: _Fp64Leaves, result: CorrectnessResult) -> str | None:
    """One output leaf of one candidate run through gate 1, then gate 2 when gate 1 fails only by
    the tolerance; the problem in words, or None."""
    import torch

    check = compare_output(index, exp, out)
    result.max_abs_error = max(result.max_abs_error, check.max_abs_error)
    result.max_rel_error = max(result.max_rel_error, check.max_rel_error)
    if isinstance(exp, torch.Tensor):
        result.atol = max(result.atol or 0.0, check.atol)
        result.rtol = max(result.rtol or 0.0, check.rtol)
    needs_fp64 = check.problem is not None and check.tolerance_only
    passed_floating = check.problem is None and isinstance(exp, torch.Tensor) and exp.is_floating_point()
    if needs_fp64 or passed_floating:  # passed: only reported, when the float64 run exists anyway
        exact = fp64.leaf(index, required=needs_fp64)
        judged = judge_fp64(exp, out, exact) if exact is not None else None
        if judged is not None:
            result.add_fp64(judged)
            if needs_fp64 and judged.ok:
                check.problem = None
                result.fp64_accepted = True
            elif needs_fp64:
                check.problem = f"{check.problem}; {judged.problem}"
        elif needs_fp64 and fp64.h.reference64 is not None and not result.fp64_note:
            result.fp64_note = getattr(fp64.h.reference64, "note", "") or "no float64 run of this output"
    return check.problem or constant_problem(index, exp, out)
