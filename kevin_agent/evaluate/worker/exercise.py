"""Input sets that exercise the computation: the task's own inputs, mixed so that they correlate,
or offset and scaled.

``get_inputs()`` is usually independent noise, and on such data some wrong answers look right: a
covariance that keeps only its diagonal leaves out terms of order 1/sqrt(n), as small as eager's
own float32 error when the data sit far from zero. Mixed inputs make those terms as large as the
diagonal, far above eager's error, so both gates of the comparison see them.

Trial 1 is plain ``get_inputs()``; trial t >= 2 uses ``VARIANTS[(t - 2) % len(VARIANTS)]``. The
choice comes from the trial's index (its seed less the run's base seed), so the judge, which
rebuilds every checked call's inputs from that call's seed, makes the same set through the same
entry point (``correctness.trial_inputs``). A seed that is no trial's (a timed call's, drawn from os.urandom)
gets plain inputs.

Per tensor, only real floating tensors change (integer, bool and complex tensors and Python values
never; shapes, dtypes, devices and strides are kept); a constant or non-finite tensor is left as
it is. "Mixed along a dimension": every slice along it moves towards one convex combination of
two of its slices, ``x_j <- (1 - b_j) x_j + b_j u`` with ``b_j`` in [0.25, 0.75], a rank-1
component shared by all slices; every value stays within the tensor's own [min, max]. "Offset and
scaled": ``a (x + s)`` with ``a`` in [0.5, 2]; a tensor of one strict sign (data far from zero)
moves most of the way towards zero and keeps its sign, any other moves by 0.5 to 1.5 standard
deviations, never across zero where all its values lie on one side.

A variant the task's domain cannot take (the reference raises on it, or gives more NaN/Inf than
on plain inputs of the same seed) is skipped for that trial: plain inputs, and the trial's
description says so. torch and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kevin_agent.evaluate.judgement import trial_seed
from kevin_agent.evaluate.worker.guards import snapshot

PLAIN = "plain get_inputs()"
# variant name -> which dimensions are mixed ("last", "leading", "every", or none), then offset and scaled?
VARIANTS: tuple[str, ...] = ("mixed-last", "mixed-leading", "offset-scaled", "mixed-every-offset-scaled")
DESCRIPTIONS = {
    "mixed-last": "get_inputs() mixed along the last dimension (correlated columns)",
    "mixed-leading": "get_inputs() mixed along every dimension but the last (correlated rows)",
    "offset-scaled": "get_inputs() offset and scaled",
    "mixed-every-offset-scaled": "get_inputs() mixed along every dimension, then offset and scaled",
}
MAX_TRIAL = 4096  # trial indices beyond this are no correctness trial's
_SALT = 0x6A09E667F3BCC908  # the variant's own draws never repeat get_inputs()'s stream
_GOLDEN = 0.6180339887498949


def variant_for(seed: int, base_seed: int) -> str | None:
    """The variant of the call seeded ``seed`` in a run with ``base_seed``; None: plain inputs
    (trial 1, and every seed that is no correctness trial's)."""
    trial = seed - trial_seed(base_seed, 0)
    if not 1 <= trial < MAX_TRIAL or trial_seed(base_seed, trial) != seed:
        return None
    return VARIANTS[(trial - 1) % len(VARIANTS)]


def exercised(inputs: Any, reference: Callable[..., Any], device: Any, seed: int, base_seed: int) -> tuple[Any, str]:
    """(what the call seeded ``seed`` runs on, in words), from the plain ``inputs`` made from that
    seed. Only through ``correctness.trial_inputs``, which the worker's trials and the judge share."""
    variant = variant_for(seed, base_seed)
    if variant is None:
        return inputs, PLAIN
    varied = exercise(inputs, variant, seed)
    if varied is None:
        return inputs, f"{PLAIN} (no floating tensor to vary)"
    problem = domain_problem(reference, varied, inputs, device)
    if problem:
        return inputs, f"{PLAIN}: {DESCRIPTIONS[variant]} skipped, {problem}"
    return varied, DESCRIPTIONS[variant]


def exercise(inputs: Any, variant: str, seed: int) -> Any:
    """``inputs`` with ``variant`` applied to each real floating tensor (nested in lists, tuples
    and dicts), drawn from ``seed``; None when no tensor changed. ``inputs`` is not modified."""
    import torch

    generator = torch.Generator().manual_seed((seed ^ _SALT) % (1 << 63))
    changed = False

    def visit(value: Any) -> Any:
        nonlocal changed
        if isinstance(value, torch.Tensor):
            varied = vary_tensor(value, variant, generator)
            changed = changed or varied is not value
            return varied
        if isinstance(value, (list, tuple)):
            return type(value)(visit(v) for v in value)
        if isinstance(value, dict):
            return {k: visit(v) for k, v in value.items()}
        return value

    varied = visit(inputs)
    return varied if changed else None


def vary_tensor(x: Any, variant: str, generator: Any) -> Any:
    """One tensor under ``variant`` (a new tensor of the same shape, dtype, device and strides), or
    ``x`` itself where the variant does not apply (not real floating, fewer than 2 elements, not
    dense, constant, non-finite, or overflowing its dtype once varied)."""
    import torch

    if not x.is_floating_point() or x.numel() < 2 or x.layout != torch.strided or x.device.type == "meta":
        return x
    work = x.detach().to(dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, copy=True)
    if not bool(torch.isfinite(work).all().item()):
        return x
    low, high = float(work.min().item()), float(work.max().item())
    if low == high:
        return x
    dims = {"mixed-last": [x.ndim - 1], "mixed-leading": list(range(max(1, x.ndim - 1))),
            "mixed-every-offset-scaled": list(range(x.ndim))}.get(variant, [])
    mixed = [d for d in dims if x.shape[d] >= 2]
    for dim in mixed:
        work = mix_along(work, dim, generator)
    if mixed:
        work = work.clamp_(low, high)  # a convex combination, up to rounding: never outside [min, max]
    if variant.endswith("offset-scaled"):
        work = offset_scaled(work, low, high, generator)
    out = torch.empty_like(x)  # x's strides, dtype and device
    out.copy_(work)
    if not bool(torch.isfinite(out).all().item()):
        return x
    return out.requires_grad_(x.requires_grad)


def mix_along(work: Any, dim: int, generator: Any) -> Any:
    """Every slice along ``dim`` moved towards one convex combination of two of its slices."""
    import torch

    size = work.shape[dim]
    picks = torch.randint(size, (2,), generator=generator)
    weights = torch.rand(2, generator=generator, dtype=torch.float64) + 0.5
    start = float(torch.rand(1, generator=generator, dtype=torch.float64).item())
    shape = [1] * work.ndim
    shape[dim] = -1
    weights = (weights / weights.sum()).to(device=work.device, dtype=work.dtype).view(shape)
    shared = (work.index_select(dim, picks.to(work.device)) * weights).sum(dim, keepdim=True)
    steps = torch.arange(size, device=work.device, dtype=torch.float64)
    blend = (0.25 + 0.5 * torch.frac(start + _GOLDEN * steps)).to(work.dtype).view(shape)
    return work * (1 - blend) + shared * blend


def offset_scaled(work: Any, low: float, high: float, generator: Any) -> Any:
    """``a * (work + s)`` with ``a`` in [0.5, 2]. A tensor of one strict sign moves towards zero,
    ``s`` = -0.9 to -0.99 of its value nearest zero (data far from zero lose the cancellation
    that makes eager's own error large); any other moves by 0.5 to 1.5 standard deviations,
    ``s >= 0`` where no value is negative and ``s <= 0`` where none is positive."""
    draws = torch_rand(3, generator)
    scale = 0.5 * 4.0 ** draws[0]
    if low > 0 or high < 0:
        shift = -(0.9 + 0.09 * draws[1]) * (low if low > 0 else high)
    else:
        spread = float(work.std().item())
        if not math.isfinite(spread) or spread <= 0:
            return work
        sign = 1.0 if low >= 0 else -1.0 if high <= 0 else (1.0 if draws[2] < 0.5 else -1.0)
        shift = sign * spread * (0.5 + draws[1])
    return work.add_(shift).mul_(scale)


def torch_rand(count: int, generator: Any) -> list[float]:
    """``count`` draws in [0, 1) from ``generator`` (the same on every device)."""
    import torch

    return [float(v) for v in torch.rand(count, generator=generator, dtype=torch.float64).tolist()]


def domain_problem(reference: Callable[..., Any], varied: Any, plain: Any, device: Any) -> str | None:
    """Why ``varied`` lies outside the task's domain (the reference raises on it, or gives more
    NaN/Inf than on ``plain``), or None. Run on copies, with the random state left as it was."""
    on_varied = _nonfinite_outputs(reference, varied, device)
    if isinstance(on_varied, str):
        return on_varied
    if on_varied == 0:
        return None
    on_plain = _nonfinite_outputs(reference, plain, device)
    if isinstance(on_plain, int) and on_varied <= on_plain:
        return None
    return f"the reference gives {on_varied} NaN/Inf values on it"


def _nonfinite_outputs(reference: Callable[..., Any], inputs: Any, device: Any) -> int | str:
    """NaN/Inf values in the reference's outputs on a copy of ``inputs``; a string when it raised."""
    import torch

    on = torch.device(device)
    try:
        with torch.random.fork_rng(devices=[on] if on.type == "cuda" else []), torch.no_grad():
            outputs = _leaves(reference(*snapshot(inputs)))
    except Exception as exc:  # a task that checks its inputs' domain
        return f"the reference raised {type(exc).__name__} on it"
    count = 0
    for leaf in outputs:
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            count += int((~torch.isfinite(leaf)).sum().item())
        elif isinstance(leaf, float) and not math.isfinite(leaf):
            count += 1
    return count


def _leaves(value: Any) -> list[Any]:
    """A forward's result as a flat list (nested lists and tuples opened)."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
