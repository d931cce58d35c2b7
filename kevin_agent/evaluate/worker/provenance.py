"""The provenance stage in the worker (issue 9): after correctness and before timing, profile one
forward call of the candidate on fresh inputs, attribute every GPU kernel to own / library / torch
/ generated / other (``evaluate.provenance``), and judge it under the run's policy.

* ``warm_profiler`` runs at worker start, before READY: the first ``torch.profiler`` session of a
  process initialises CUPTI (about a second), which must not land on a candidate's clock. It also
  checks that the profiler sees GPU work at all; when it does not, provenance is *unavailable* in
  this worker and candidates are flagged (not counted as best) instead of judged.
* ``reference_launches`` counts the reference's GPU launches on the provenance inputs (partial's
  yardstick); the baseline job stores it in ``Baseline.reference_kernels`` once per task.
* ``check_provenance`` returns the rejection verdict, or None (accepted, or unavailable: then
  ``ctx.details`` is flagged suspicious with the reason). A candidate that raises while profiled
  fails like any run-time error.

Runs inside the isolated worker process only (it executes model-written code).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent import feedback
from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.eval_modes import STRICT, Policy
from kevin_agent.evaluate.provenance.attribution import OwnKernels
from kevin_agent.evaluate.provenance.policy import (
    ProvenanceResult,
    generated_code_message,
    judge,
    unchecked_message,
    with_reason,
)
from kevin_agent.evaluate.provenance.profile import HEAD_PADDING, IncompleteProfile, ProfilerHandles, profile_forward
from kevin_agent.evaluate.provenance.symbols import ExtensionKernels, list_kernels, source_kernels
from kevin_agent.evaluate.provenance.trace import KernelActivity, launch_count
from kevin_agent.evaluate.worker.correctness import make_inputs
from kevin_agent.evaluate.worker.guards import CapturedReferences, snapshot
from kevin_agent.evaluate.worker.loader import describe_exception, raised_by_generated_code

PROVENANCE_SEED_OFFSET = 20_000  # its own inputs, apart from correctness and timing
PROFILE_LEAD_IN_MAX = 3  # untimed calls before the profiled one: a random count, 0 to this
HINTS_IN_MESSAGE = 4
WARM_UP_PROBE = "kevin_warm_up_probe"

# Set by ``warm_profiler`` at worker start: why provenance cannot run in this worker (None: it can).
_UNAVAILABLE: dict[str, Optional[str]] = {"reason": "the profiler was not warmed up"}


class CandidateRaised(Exception):
    """The candidate's own forward raised while it was profiled (not a profiler failure)."""


def profiler_handles(captured: CapturedReferences) -> ProfilerHandles:
    """The profiler's entry points as captured at worker start (before any candidate code ran)."""
    def get(path: str) -> Any:
        return captured.objects.get(path)

    handles = ProfilerHandles(get("torch.profiler.profile"), get("torch.profiler.ProfilerActivity"),
                              get("torch.profiler.record_function"), get("torch.cuda.synchronize"),
                              get("torch.no_grad"))
    if not all(callable(h) for h in (handles.profile, handles.activity, handles.record_function,
                                     handles.synchronize, handles.no_grad)):
        raise RuntimeError("torch.profiler was not importable when the worker started")
    return handles


def warm_profiler(captured: CapturedReferences, device: Any) -> Optional[str]:
    """Profile a tiny fill once (CUPTI's one-time setup) and check that GPU work shows up.
    Returns why provenance is unavailable in this worker, or None when it works."""
    import torch

    try:
        handles = profiler_handles(captured)
        probe = torch.empty(256, device=device)
        activities = profile_forward(lambda t: t.fill_(1.0), (probe,), device, handles)
        reason = None if any(a.kind in ("kernel", "memset") for a in activities) else \
            "the profiler recorded no GPU work for a test kernel (CUPTI unavailable?)"
    except Exception as exc:  # no CUPTI, no permission, a torch without Kineto
        reason = f"the profiler failed: {type(exc).__name__}: {str(exc)[:300]}"
    _UNAVAILABLE["reason"] = reason
    if reason:
        print(f"kevin-worker: provenance unavailable: {reason}", file=sys.stderr, flush=True)
    return reason


def unavailable_reason() -> Optional[str]:
    return _UNAVAILABLE["reason"]


def provenance_inputs(ctx: Any, task: Any) -> Any:
    ctx.seed_all(ctx.settings.seed + PROVENANCE_SEED_OFFSET)
    return make_inputs(task.get_inputs, ctx.device)


def own_kernels(results: Iterable[Any]) -> tuple[OwnKernels, list[ExtensionKernels]]:
    """The union of the kernels built into every extension the candidate loaded (``BuildResult``s
    recorded by the load_inline hook; a result without a listing is listed now, ~50 ms), kept to
    those a ``__global__`` of the candidate's own text defines: by the origins the build stored
    (``facts.kernels``, from the preprocessed sources, so a cached build has them too), else by
    the sources beside the module when a build left them there."""
    listings: dict[str, ExtensionKernels] = {}
    origins: dict[str, Optional[set[str]]] = {}
    for result in results:
        path = getattr(result, "module_path", None)
        if not path or path in listings:
            continue
        raw = getattr(result, "kernels", None)
        listings[path] = ExtensionKernels.from_dict(raw) if raw else list_kernels(path)
        origins[path] = stored_origins(result)
    extensions = list(listings.values())
    own = OwnKernels.from_extensions(extensions)
    if own and origins and all(o is not None for o in origins.values()):
        return own.from_sources(set().union(*(o for o in origins.values() if o is not None)), qualified=True), \
            extensions
    defined = [source_kernels(path) for path in listings]
    if own and defined and all(d is not None for d in defined):  # every build's sources are there
        own = own.from_sources(set().union(*(d for d in defined if d is not None)))
    return own, extensions


def stored_origins(result: Any) -> Optional[set[str]]:
    """Qualified names of the ``__global__`` functions the build's facts found defined in the
    candidate's own text; None when the result carries no readable facts."""
    facts = getattr(result, "facts", None)
    if not isinstance(facts, dict) or facts.get("error") or not isinstance(facts.get("kernels"), list):
        return None
    return {str(name) for name in facts["kernels"]}


def _profile(fn: Callable[..., Any], inputs: Any, ctx: Any, label: str,
             outputs: Optional[list[Any]] = None) -> list[KernelActivity]:
    """One profiled call of ``fn`` on ``inputs`` (a copy, unless ``outputs`` is given: then the
    call gets the rotation's staging buffers as timed calls do, and its output is appended)."""
    def guarded(*args: Any) -> Any:
        try:
            out = fn(*args)
        except Exception as exc:
            raise CandidateRaised(str(exc)) from exc
        if outputs is not None:
            outputs.append(out)
        return out

    keep = Path(ctx.candidate_path).parent / f"profile-{label}.json"
    call_inputs = (lambda: inputs) if outputs is not None else (lambda: snapshot(inputs))
    try:
        return profile_forward(guarded, call_inputs(), ctx.device, profiler_handles(ctx.captured), keep)
    except IncompleteProfile:  # the profiler lost a kernel record: once more, in a new session
        if outputs is not None:
            outputs.clear()
        return profile_forward(guarded, call_inputs(), ctx.device, profiler_handles(ctx.captured), keep,
                               padding=4 * HEAD_PADDING)


def _profile_like_a_timed_call(ctx: Any, given: ProvenanceInputs) -> tuple[Any, list[KernelActivity]]:
    """(the inputs profiled, the activities). With a rotation (issue 19): a random number of
    plain calls first, then the profiled one, each on the rotation's next input set in the same
    staging buffers as the timed calls, its output sampled like theirs: the profiled call is one at
    a random position among calls the candidate cannot tell apart."""
    rotation = given.rotation
    if rotation is None:
        inputs = provenance_inputs(ctx, given.task)
        return inputs, _profile(given.candidate, inputs, ctx, "candidate")
    import secrets

    import torch

    with torch.no_grad():
        for _ in range(secrets.randbelow(PROFILE_LEAD_IN_MAX + 1)):
            index, args = rotation.next_args()
            try:
                out = given.candidate(*args)
            except Exception as exc:
                raise CandidateRaised(str(exc)) from exc
            rotation.returned(index, out)
    index, args = rotation.next_args()
    outputs: list[Any] = []
    activities = _profile(given.candidate, args, ctx, "candidate", outputs)
    if outputs:
        rotation.returned(index, outputs[-1])
    return snapshot(args), activities


def reference_launches(ctx: Any, reference: Any, inputs: Any) -> Optional[int]:
    """GPU launches (kernels + memcpy/memset) of one reference forward; None when unavailable."""
    if unavailable_reason():
        return None
    try:
        return launch_count(_profile(reference, inputs, ctx, "reference"))
    except Exception as exc:  # advisory for the baseline: partial then skips its launch rule
        print(f"kevin-worker: reference profile failed: {type(exc).__name__}: {exc}"[:1000], file=sys.stderr)
        return None


@dataclass
class ProvenanceInputs:
    """What the stage needs besides the context."""

    task: Any
    reference: Any
    candidate: Any
    reference_kernels: Optional[int]  # from the baseline, when it measured them
    extensions: Sequence[Any]  # BuildResults the load_inline hook recorded
    hints: Callable[[], list[str]]  # static hints about the source (only computed on rejection)
    rotation: Any = None  # the timing's Rotation: profile a call that looks like a timed one


def generated_code_rejection(ctx: Any, text: str) -> Verdict:
    """torch.compile or Triton in the answer, stopped before its code ran (the sandbox forbids the
    compiler's processes and cache writes): rejected by the policy's rule on generated code."""
    d: VerdictDetails = ctx.details
    policy = ctx.settings.policy  # a Policy: EvalSettings parsed it
    reason = "generated code (torch.compile or Triton) in the answer"
    d.provenance.policy, d.provenance.ok, d.provenance.reasons = policy, False, [reason]
    d.provenance.summary = f"provenance {policy}: rejected; {reason}, stopped before it ran"
    return ctx.fail(Stage.PROVENANCE, generated_code_message(policy, text), text)


def check_provenance(ctx: Any, given: ProvenanceInputs) -> Optional[Verdict]:
    """The PROVENANCE rejection, or None (accepted, or unavailable in this worker and flagged
    suspicious). Fails closed on the candidate's side: no kernel listed in its extension(s), or a
    profile of its call that fails, rejects it (the message says why), under either policy.
    On acceptance ``ctx.provenance`` holds the result for the feedback of the timed verdict."""
    d: VerdictDetails = ctx.details  # ctx: worker Context, or a test's stand-in
    policy: Policy = ctx.settings.policy  # parsed when the settings were resolved, never again here
    d.provenance.policy = policy
    if unavailable_reason():  # the worker's profiler failed before any candidate code ran
        _unavailable(ctx, unavailable_reason() or "")
        return None
    own, extensions = own_kernels(given.extensions)
    unlisted = None if own else _no_listing(extensions)
    try:
        inputs, activities = _profile_like_a_timed_call(ctx, given)
    except CandidateRaised as exc:
        cause = exc.__cause__ or exc
        text = describe_exception(cause, ctx.candidate_path)
        if raised_by_generated_code(cause):
            return generated_code_rejection(ctx, text)
        return ctx.fail(Stage.PROVENANCE, feedback.runtime_error(text), text)
    except Exception as exc:
        why = f"profiling your forward call failed ({type(exc).__name__}: {str(exc)[:300]})"
        return _unchecked(ctx, policy, [r for r in (unlisted, why) if r])
    patched = ctx.patched()
    if patched:
        return ctx.fail(Stage.PROVENANCE, patched)
    launches = given.reference_kernels
    result = judge(activities, own, launches, policy)
    if launches is None and (policy != STRICT or not result.ok):  # partial's rule needs the reference
        launches = reference_launches(ctx, given.reference, inputs)
        result = judge(activities, own, launches, policy) if launches is not None else result
    if unlisted:
        result = with_reason(result, unlisted)
    _record(d, result)
    if result.ok:
        ctx.provenance = result
        return None
    return ctx.fail(Stage.PROVENANCE, rejection_feedback(result, given.hints()), "; ".join(result.reasons))


def _unchecked(ctx: Any, policy: Policy, reasons: list[str]) -> Verdict:
    """Provenance could not be judged for a reason on the candidate's side: a rejection."""
    d: VerdictDetails = ctx.details
    d.provenance.ok, d.provenance.reasons = False, list(reasons)
    d.provenance.summary = f"provenance {policy}: rejected; not checkable: " + "; ".join(reasons)
    return ctx.fail(Stage.PROVENANCE, unchecked_message(policy, reasons), "; ".join(reasons))


def _no_listing(extensions: list[ExtensionKernels]) -> str:
    """Why no own kernel is known: what the model must fix."""
    if not extensions:
        return ("no load_inline extension was recorded for your answer (your own kernels must be compiled "
                "through torch.utils.cpp_extension.load_inline)")
    notes = "; ".join(n for e in extensions for n in e.notes)
    return ("no CUDA kernel (__global__ function) could be listed in your compiled extension"
            + (f" ({notes})" if notes else "") + ", so none of the GPU work can be your own")


def _unavailable(ctx: Any, reason: str) -> Optional[Verdict]:
    d: VerdictDetails = ctx.details
    d.trust.suspicious = True
    d.trust.reasons = list(d.trust.reasons) + [f"provenance not checked: {reason}"]
    d.provenance.summary = f"provenance not checked: {reason}"
    return None


def _record(d: VerdictDetails, result: ProvenanceResult) -> None:
    d.provenance = result.verdict_record()


def rejection_feedback(result: ProvenanceResult, hints: list[str]) -> str:
    """The model's feedback for a rejected candidate: the policy's message, then where in the
    source the foreign work most likely comes from (the static compute rules, as hints)."""
    text = result.message
    if hints:
        shown = hints[:HINTS_IN_MESSAGE]
        more = f"\n... and {len(hints) - len(shown)} more." if len(hints) > len(shown) else ""
        text += "\nWhere your code likely does that work:\n" + "\n".join(shown) + more
    return text
