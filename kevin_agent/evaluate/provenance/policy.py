"""The two provenance policies and their verdict: what may run on the GPU besides the candidate's
own kernels.

``strict`` (default; Kevin's "pure CUDA"): every *compute* kernel is the candidate's own. Foreign
kernels may only be
  * fills (values that do not depend on the inputs: ``torch::zeros``, ``fill_``, ``arange``,
    random numbers, memset), together at most ``STRICT_FILL_SHARE`` (50%) of the call's GPU time;
  * copies (``.contiguous()``, ``.to(dtype)``, ``copy_``, memcpy), at most ``STRICT_COPY_SHARE``
    (10%).
``partial`` (KernelBench's rule, replace any subset of the operators): library and PyTorch kernels
are allowed; generated code (Triton, torch.compile) is not; at least one own kernel must run; and
the candidate must have replaced something: its foreign non-fill launches are fewer than the
reference's launches on the same inputs. Whatever ``strict`` accepts, ``partial`` accepts.

Why these numbers (docs/provenance.md has the long form): a fill cannot carry the module's work
(it never reads the inputs), so it only costs the candidate time, which the timing stage charges
anyway; but a zero-initialised output before a memory-bound kernel is already a third to a half of
the GPU time (the fill writes N elements, the kernel reads N and writes N; at small sizes each
kernel's fixed cost dominates), so the fill budget is a half, not a tenth. A copy can carry work (a
transpose or a dtype cast *is* the module's work in some tasks), so copies get the small share: 10%
admits re-laying out an operand next to a compute-bound kernel, and rejects a candidate whose
copies are a real part of the work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from kevin_agent.eval_modes import DEFAULT_POLICY, PARTIAL, STRICT, Policy
from kevin_agent.eval_modes import POLICIES as POLICIES  # re-exported (evaluate.provenance)
from kevin_agent.evaluate.provenance import names as N
from kevin_agent.evaluate.provenance.attribution import KernelRow, OwnKernels, kernel_rows
from kevin_agent.evaluate.provenance.symbols import ExtensionKernels
from kevin_agent.evaluate.provenance.trace import KernelActivity, ProfileTrace
from kevin_agent.verdict_records import ProvenanceRecord

STRICT_FILL_SHARE = 0.50  # fills (constants, ranges, random numbers, memset) of the call's GPU time
STRICT_COPY_SHARE = 0.10  # layout and dtype copies, memcpy
# Below these totals the shares are not applied: at a few microseconds every kernel costs about its
# launch, so a zeroed output of 128 floats is "half the GPU time" next to a 128-element kernel
# (KernelBench's own add example). A fill cannot carry the module's work at any size; 10 us of
# copies moves at most ~16 MB on an H200, too little to hide a real operator behind.
STRICT_FILL_FLOOR_MS = 0.1
STRICT_COPY_FLOOR_MS = 0.01
TABLE_ROWS = 5
VERDICT_KERNEL_ROWS = 40  # rows kept in a verdict (largest first; ATen template names run to 1,000+ chars)
VERDICT_NAME_CHARS = 400
NAMES_IN_MESSAGE = 4

POLICY_RULES: dict[Policy, str] = {
    STRICT: ("policy strict: all of the module's computation must run in your own CUDA kernels; no library "
             "kernels (cuBLAS, cuDNN, CUTLASS, CUB device-wide...), no PyTorch compute kernels, no Triton or "
             f"torch.compile code; allocation fills may take up to {STRICT_FILL_SHARE:.0%} and layout copies up to "
             f"{STRICT_COPY_SHARE:.0%} of the GPU time"),
    PARTIAL: ("policy partial: you may replace any subset of the operators and leave the rest to library "
              "(cuBLAS, cuDNN...) or PyTorch kernels, but at least one of your own kernels must run, no Triton or "
              "torch.compile code may run, and your answer must launch fewer non-own kernels than the original "
              "module does"),
}

POLICY_PROMPTS: dict[Policy, str] = {
    STRICT: ("Every computation in the forward pass must run in your own CUDA kernels: do not call PyTorch "
             "operators, cuBLAS, cuDNN or other libraries, Triton or torch.compile for the work. Allocating outputs "
             "(torch::empty, torch::zeros) and small layout copies are fine. The evaluator profiles the GPU and "
             "rejects answers whose work runs in foreign kernels."),
    PARTIAL: ("You may replace any subset of the operators with your own CUDA kernels and keep PyTorch or library "
              "(cuBLAS, cuDNN) calls for the rest, but at least one of your kernels must run, it must replace work "
              "(fewer non-own kernel launches than the original), and Triton or torch.compile code is not allowed. "
              "The evaluator profiles the GPU to check this."),
}


@dataclass
class ForeignSummary:
    """The GPU work that did not come from the candidate's own kernels."""

    launches: int = 0  # all foreign GPU operations (kernel launches + memcpy/memset)
    counted_launches: int = 0  # the ones partial compares with the reference: all but fills
    compute_launches: int = 0
    share: float = 0.0
    compute_share: float = 0.0
    fill_share: float = 0.0
    copy_share: float = 0.0
    generated_share: float = 0.0
    by_origin: dict[str, float] = field(default_factory=dict)  # share of GPU time per foreign origin
    names: list[str] = field(default_factory=list)  # the largest foreign kernels, described


@dataclass
class ProvenanceResult:
    """The provenance verdict for one candidate under one policy."""

    ok: bool
    policy: Policy
    own_share: float
    own_ms: float
    total_ms: float
    kernels: list[KernelRow]
    foreign: ForeignSummary
    reference_launches: int | None
    partial_would_accept: bool | None  # strict only: whether partial would have accepted it
    reasons: list[str]  # why it was rejected (empty when ok)
    message: str  # for the model: rejection feedback ("" when ok)
    table: str  # top kernels by GPU time, own vs foreign, for the feedback of a correct candidate
    summary: str  # one line for the user

    def to_dict(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["kernels"] = [row.to_dict() for row in self.kernels]
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProvenanceResult:
        values = dict(raw)
        values["kernels"] = [KernelRow.from_dict(r) for r in raw.get("kernels") or ()]
        values["foreign"] = ForeignSummary(**(raw.get("foreign") or {}))
        return cls(**{k: values[k] for k in cls.__dataclass_fields__})

    def verdict_record(self) -> ProvenanceRecord:
        """What the verdict carries: the top kernels, ``own_share``, the policy's decision and summary."""
        return ProvenanceRecord(
            kernels=[{"name": r.name[:VERDICT_NAME_CHARS], "origin": r.origin, "calls": r.calls, "ms": r.ms,
                      "share": r.share, "role": r.role, "family": r.family}
                     for r in self.kernels[:VERDICT_KERNEL_ROWS]],
            own_share=self.own_share, foreign_share=self.foreign.share, policy=self.policy, ok=self.ok,
            partial_would_accept=self.partial_would_accept, reasons=list(self.reasons),
            reference_launches=self.reference_launches, summary=self.summary)


def judge(kernels: Iterable[KernelActivity] | ProfileTrace,
          own_names: OwnKernels | Iterable[str] | Iterable[ExtensionKernels],
          reference_kernel_count: int | None, policy: Policy = DEFAULT_POLICY) -> ProvenanceResult:
    """Decide one candidate's profiled forward call under ``policy`` (parsed with the settings).

    ``kernels``: the candidate's activities; ``own_names``: the kernels built into its extension(s);
    ``reference_kernel_count``: GPU launches of the reference forward on the same inputs (None when
    unknown: partial's "replaced something" rule is then not applied).
    """
    activities = kernels.activities if isinstance(kernels, ProfileTrace) else list(kernels)
    own = _own(own_names)
    rows = kernel_rows(activities, own)
    total = sum(r.ms for r in rows)
    own_ms = sum(r.ms for r in rows if r.origin == N.OWN)
    own_share = own_ms / total if total > 0 else (1.0 if any(r.origin == N.OWN for r in rows) else 0.0)
    foreign = _summarise(rows)
    strict_reasons = _strict_reasons(rows, foreign)
    partial_reasons = _partial_reasons(rows, foreign, reference_kernel_count, not strict_reasons)
    reasons = strict_reasons if policy == STRICT else partial_reasons
    partial_ok = not partial_reasons
    result = ProvenanceResult(
        ok=not reasons, policy=policy, own_share=own_share, own_ms=own_ms, total_ms=total, kernels=rows,
        foreign=foreign, reference_launches=reference_kernel_count,
        partial_would_accept=partial_ok if policy == STRICT else None, reasons=reasons, message="",
        table=kernel_table(rows, total), summary="")
    result.message = "" if result.ok else rejection_message(result)
    result.summary = _summary(result)
    return result


def _own(own_names: OwnKernels | Iterable[str] | Iterable[ExtensionKernels]) -> OwnKernels:
    if isinstance(own_names, OwnKernels):
        return own_names
    items = list(own_names)
    extensions = [i for i in items if isinstance(i, ExtensionKernels)]
    if items and len(extensions) == len(items):
        return OwnKernels.from_extensions(extensions)
    return OwnKernels([str(i) for i in items])


def _summarise(rows: list[KernelRow]) -> ForeignSummary:
    foreign = [r for r in rows if r.foreign]
    summary = ForeignSummary()
    for row in foreign:
        summary.launches += row.calls
        summary.share += row.share
        summary.by_origin[row.origin] = summary.by_origin.get(row.origin, 0.0) + row.share
        if row.role != N.FILL:
            summary.counted_launches += row.calls
        if row.role == N.COMPUTE:
            summary.compute_launches += row.calls
            summary.compute_share += row.share
        elif row.role == N.FILL:
            summary.fill_share += row.share
        else:
            summary.copy_share += row.share
        if row.origin == N.GENERATED:
            summary.generated_share += row.share
    summary.names = [describe(r) for r in foreign[:NAMES_IN_MESSAGE]]
    return summary


def _strict_reasons(rows: list[KernelRow], foreign: ForeignSummary) -> list[str]:
    reasons = []
    if not any(r.origin == N.OWN for r in rows):
        reasons.append("none of your own kernels ran")
    compute = [r for r in rows if r.foreign and r.role == N.COMPUTE]
    if compute:
        reasons.append(f"foreign compute kernels ran ({_percent(foreign.compute_share)} of the GPU time): "
                       + "; ".join(describe(r) for r in compute[:NAMES_IN_MESSAGE])
                       + (f"; and {len(compute) - NAMES_IN_MESSAGE} more" if len(compute) > NAMES_IN_MESSAGE else ""))
    copy_ms = sum(r.ms for r in rows if r.foreign and r.role == N.COPY)
    fill_ms = sum(r.ms for r in rows if r.foreign and r.role == N.FILL)
    if foreign.copy_share > STRICT_COPY_SHARE and copy_ms > STRICT_COPY_FLOOR_MS:
        copies = [r for r in rows if r.foreign and r.role == N.COPY]
        reasons.append(f"copies took {_percent(foreign.copy_share)} of the GPU time (at most "
                       f"{STRICT_COPY_SHARE:.0%} allowed): "
                       + "; ".join(describe(r) for r in copies[:NAMES_IN_MESSAGE]))
    if foreign.fill_share > STRICT_FILL_SHARE and fill_ms > STRICT_FILL_FLOOR_MS:
        fills = [r for r in rows if r.foreign and r.role == N.FILL]
        reasons.append(f"fills took {_percent(foreign.fill_share)} of the GPU time (at most "
                       f"{STRICT_FILL_SHARE:.0%} allowed): " + "; ".join(describe(r) for r in fills[:NAMES_IN_MESSAGE]))
    return reasons


def _partial_reasons(rows: list[KernelRow], foreign: ForeignSummary, reference_launches: int | None,
                     strict_ok: bool) -> list[str]:
    reasons = []
    if not any(r.origin == N.OWN for r in rows):
        reasons.append("none of your own kernels ran")
    generated = [r for r in rows if r.origin == N.GENERATED]
    if generated:
        reasons.append(f"generated code ran ({_percent(foreign.generated_share)} of the GPU time): "
                       + "; ".join(describe(r) for r in generated[:NAMES_IN_MESSAGE]))
    if not strict_ok and reference_launches is not None and foreign.counted_launches >= reference_launches:
        reasons.append(f"it launched {foreign.counted_launches} non-own kernels (fills not counted), not fewer than "
                       f"the {reference_launches} the original module launches: nothing was replaced")
    return reasons


def describe(row: KernelRow) -> str:
    """``cuDNN sm90_xmma_fprop_... from aten::conv2d (1 call, 71.3%)``."""
    what = row.family if row.origin != N.OWN else "own"
    role = f" {row.role}" if row.role != N.COMPUTE else ""
    source = f" from {row.called_from}" if row.called_from else ""
    calls = f"{row.calls} call{'s' if row.calls != 1 else ''}"
    return f"{what}{role} {N.short_name(row.name, 80)}{source} ({calls}, {_percent(row.share)})"


def kernel_table(rows: list[KernelRow], total_ms: float | None = None, limit: int = TABLE_ROWS) -> str:
    """Top kernels by GPU time, own vs foreign, as plain text for the model and the user."""
    if not rows:
        return "No GPU work was recorded for one forward call."
    total = total_ms if total_ms is not None else sum(r.ms for r in rows)
    shown = rows[:limit]
    head = (f"GPU time of one forward call by kernel (top {len(shown)} of {len(rows)}; "
            f"total {total:.3f} ms):" if len(rows) > len(shown) else
            f"GPU time of one forward call by kernel (total {total:.3f} ms):")
    lines = [head]
    for row in shown:
        origin = "own" if row.origin == N.OWN else f"{row.origin}{'/' + row.role if row.role != N.COMPUTE else ''}"
        lines.append(f"  {_percent(row.share):>6}  {row.ms:8.3f} ms  {row.calls:>4}x  {origin:<14} "
                     f"{N.short_name(row.name)}")
    own = sum(r.share for r in rows if r.origin == N.OWN)
    lines.append(f"Own kernels: {_percent(own)} of the GPU time; foreign: {_percent(1.0 - own if rows else 0.0)}.")
    return "\n".join(lines)


def rejection_message(result: ProvenanceResult) -> str:
    """Feedback for the model: what ran that the policy does not allow, and what the policy allows."""
    text = ("Your answer was correct, but the kernel provenance check rejected it "
            f"({POLICY_RULES[result.policy]}). On the GPU: " + "; ".join(result.reasons) + ". "
            f"Your own kernels took {_percent(result.own_share)} of the GPU time.")
    if result.policy == STRICT:
        text += " Implement that work in your own CUDA kernels."
    return text


def with_reason(result: ProvenanceResult, reason: str) -> ProvenanceResult:
    """``result`` rejected for one more reason, put first (e.g. no own kernel could be listed)."""
    import dataclasses

    reasons = [reason] + [r for r in result.reasons if r != reason]
    out = dataclasses.replace(result, ok=False, reasons=reasons, partial_would_accept=(
        False if result.policy == STRICT else None))
    out.message = rejection_message(out)
    out.summary = _summary(out)
    return out


def unchecked_message(policy: Policy, reasons: list[str]) -> str:
    """Feedback when what ran on the GPU could not be judged for a reason on the answer's side."""
    return ("Your answer was correct, but the kernel provenance check rejected it "
            f"({POLICY_RULES[policy]}): what ran on the GPU could not be checked: " + "; ".join(reasons) + ". "
            "An answer whose GPU work cannot be attributed to its own kernels does not count.")


def generated_code_message(policy: Policy, detail: str) -> str:
    """Feedback when torch.compile or Triton in the answer was stopped before it ran (by the sandbox
    or a failed compile): the rule it breaks, then what happened."""
    return ("The kernel provenance check rejected your answer: it uses torch.compile or Triton (generated code), "
            f"which the rules do not allow ({POLICY_RULES[policy]}). The evaluator stopped it before it ran: "
            f"{detail}")


def profile_feedback(result: ProvenanceResult, sol_fraction: float | None = None) -> str:
    """The lines appended to a correct candidate's feedback: the kernel table and speed of light."""
    lines = [result.table]
    if sol_fraction is not None and sol_fraction > 0:
        lines.append(f"The answer runs at {_percent(sol_fraction)} of this GPU's speed of light for this module "
                     "(the fastest its FLOPs and bytes could run).")
    return "\n".join(lines)


def _summary(result: ProvenanceResult) -> str:
    head = (f"provenance {result.policy}: {'accepted' if result.ok else 'rejected'}; own kernels "
            f"{_percent(result.own_share)}")
    if result.foreign.launches:
        parts = ", ".join(f"{origin} {_percent(share)}" for origin, share in sorted(result.foreign.by_origin.items()))
        head += f"; foreign {parts}"
    if result.policy == STRICT and not result.ok:
        head += f"; partial would {'accept' if result.partial_would_accept else 'also reject'}"
    return head


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%"
