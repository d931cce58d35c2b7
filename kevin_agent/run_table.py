"""The numbers every face shows for a run: one row per candidate, and an honest conclusion.

A kernel is called a win only when it beats the faster of eager PyTorch and torch.compile;
otherwise the conclusion says plainly which of the two is the better choice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from kevin_agent.data import REPLAY_GPU_NAME, Candidate, TimingStats, Verdict, VerdictDetails
from kevin_agent.run_record import RunRecord, RunSummary
from kevin_agent.verdict_text import gpu_short, is_replayed, measured_label, untrusted_label


def plural(count: int, word: str) -> str:
    """"1 turn", "4 turns", "1 trajectory", "2 trajectories"."""
    if count == 1:
        return f"{count} {word}"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{count} {word[:-1]}ies"
    return f"{count} {word}s"


def turn_label(turn: int, turns: int) -> str:
    """A turn as every face shows it: 0-based like candidate ids (t<trajectory>.<turn>) and tables,
    with the range, e.g. "2 (0-3)"."""
    return f"{turn} (0-{max(turns - 1, 0)})"


@dataclass(frozen=True)
class CandidateRow:
    candidate_id: str
    trajectory: int
    turn: int
    stage: str  # the last stage reached, "pending" while in flight
    ok: Optional[bool]
    kernel_ms: Optional[float]
    speedup_vs_eager: Optional[float]
    speedup_vs_compile: Optional[float]
    sol_percent: Optional[float]
    suspicious: bool  # not trusted (kept for readers of ``--json``; see ``untrusted``)
    message: str  # first line of the verdict's message
    untrusted: str = ""  # "not trusted: <short labels>", "" when trusted (or pending)
    measured_on: Optional[str] = None  # "NVIDIA H200", or "NVIDIA H200, replayed" (verdict_text.gpu_short)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidate_row(candidate: Candidate, verdict: Optional[Verdict]) -> CandidateRow:
    if verdict is None:
        return CandidateRow(candidate.id, candidate.trajectory, candidate.turn, "pending", None,
                            None, None, None, None, False, "")
    details = verdict.details
    sol = details.timing.sol_fraction * 100.0 if details.timing.sol_fraction is not None else None
    lines = verdict.message.strip().splitlines()
    return CandidateRow(
        candidate_id=candidate.id, trajectory=candidate.trajectory, turn=candidate.turn,
        stage=verdict.stage.value, ok=verdict.ok,
        kernel_ms=details.timing.kernel.median_ms if details.timing.kernel else None,
        speedup_vs_eager=details.timing.speedup_vs_eager if verdict.correct else None,
        speedup_vs_compile=details.timing.speedup_vs_compile if verdict.correct else None,
        sol_percent=sol, suspicious=not verdict.trusted, message=lines[0] if lines else "",
        untrusted=untrusted_label(verdict, short=True) or "",
        measured_on=gpu_short(details) if verdict.stage.value not in _MADE_HERE else None,
    )


_MADE_HERE = ("format", "static")  # verdicts made without a GPU, wherever the others came from


def candidate_rows(record: RunRecord) -> list[CandidateRow]:
    return [candidate_row(c, v) for c, v in record.candidates]


@dataclass(frozen=True)
class Conclusion:
    best_id: Optional[str]
    speedup_vs_eager: Optional[float]
    speedup_vs_compile: Optional[float]
    win: bool  # beats the faster of eager and torch.compile
    better_choice: str  # "kernel" | "tie" | "torch.compile" | "eager"
    text: str  # one or two plain sentences for the user

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MIN_MARGIN = 0.02  # a kernel must also be at least 2% faster than the baseline to win


def compare_times(kernel: Optional[TimingStats], baseline: Optional[TimingStats]) -> str:
    """"faster", "slower" or "tie": faster only when the kernel's median interval lies wholly
    below the baseline's and the medians differ by at least ``MIN_MARGIN``."""
    if kernel is None or baseline is None or kernel.median_ms <= 0 or baseline.median_ms <= 0:
        return "tie"
    (k_low, k_high), (b_low, b_high) = kernel.interval, baseline.interval
    if k_high < b_low and baseline.median_ms >= (1 + MIN_MARGIN) * kernel.median_ms:
        return "faster"
    if b_high < k_low and kernel.median_ms >= (1 + MIN_MARGIN) * baseline.median_ms:
        return "slower"
    return "tie"


def better_choice(details: VerdictDetails) -> str:
    """"kernel" when it beats the faster of eager and torch.compile beyond the timing noise;
    "tie" when it is level with it; else "torch.compile" or "eager", whichever is faster."""
    t = details.timing
    if t.kernel is None or t.eager is None:  # stored without timings: speedups only
        return _better_by_speedups(t.speedup_vs_eager, t.speedup_vs_compile)
    baselines = [("eager", t.eager)] + ([("torch.compile", t.compiled)] if t.compiled else [])
    name, fastest = min(baselines, key=lambda item: item[1].median_ms)
    verdict = compare_times(t.kernel, fastest)
    return {"faster": "kernel", "tie": "tie"}.get(verdict, name)


def _better_by_speedups(speedup_vs_eager: Optional[float], speedup_vs_compile: Optional[float]) -> str:
    eager = speedup_vs_eager or 0.0
    if speedup_vs_compile is None:
        return "kernel" if eager > 1.0 + MIN_MARGIN else "eager"
    if min(eager, speedup_vs_compile) > 1.0 + MIN_MARGIN:
        return "kernel"
    return "torch.compile" if speedup_vs_compile < eager else "eager"


def tie_with(details: VerdictDetails) -> str:
    """The baseline a tied kernel is level with."""
    compiled, eager = details.timing.compiled, details.timing.eager
    if compiled is not None and eager is not None and compiled.median_ms < eager.median_ms:
        return "torch.compile"
    return "eager PyTorch"


def speedup_text(value: Optional[float], missing: str = "-") -> str:
    """``1.84x``, or ``missing`` when there is no number (every face writes speedups so)."""
    return missing if value is None else f"{value:.2f}x"


def best_text(run: RunSummary) -> str:
    """A listed run's best speedup: ``-``, ``1.84x``, or ``1.84x (replayed)`` (not measured here)."""
    text = speedup_text(run.best_speedup)
    return f"{text} (replayed)" if run.replayed and run.best_speedup is not None else text


def _fmt(speedup: Optional[float]) -> str:
    return speedup_text(speedup, "n/a")


def conclude(record: RunRecord) -> Conclusion:
    """What the user should take from the run."""
    gpu = record.gpu_name
    replayed = any(v is not None and is_replayed(v.details) for _, v in record.candidates)
    note = " (replayed verdicts: not a measurement here)" if replayed else ""
    best = record.best()
    if best is None:
        extra = _untrusted_note(record)
        if record.status in ("cancelled", "failed", "running"):  # unfinished: no verdict on the module
            return Conclusion(None, None, None, False, "eager",
                              f"No correct kernel so far: the run {_unfinished(record.status)} before "
                              f"it finished.{extra}{note}")
        return Conclusion(None, None, None, False, "eager",
                          f"No correct kernel was found; keep the PyTorch module.{extra}{note}")
    candidate, verdict = best
    better = better_choice(verdict.details)
    text = verdict_conclusion(candidate.id, verdict.details, gpu)
    note = "" if is_replayed(verdict.details) else note  # the conclusion says where, once
    return Conclusion(candidate.id, verdict.details.timing.speedup_vs_eager, verdict.details.timing.speedup_vs_compile,
                      better == "kernel", better, text + note)


def measured_where(details: VerdictDetails, run_gpu: Optional[str] = None) -> str:
    """Where a verdict's numbers were measured, as a conclusion says it: " on NVIDIA H200", or
    ", measured on NVIDIA H200 in run X, replayed here" for a replayed verdict; "" when unknown."""
    if is_replayed(details):
        return f", {measured_label(details)}"
    gpu = run_gpu or details.environment.gpu_name
    return f" on {gpu}" if gpu and gpu != REPLAY_GPU_NAME else ""


def verdict_conclusion(candidate_id: str, details: VerdictDetails, run_gpu: Optional[str] = None,
                       kernel: str = "best kernel") -> str:
    """What one timed verdict concludes, as every face says it (the run's conclusion, accept's note):
    a win, a tie, or which of eager and torch.compile to keep instead; ``kernel`` names it."""
    return _conclusion_text(candidate_id, details, better_choice(details), measured_where(details, run_gpu), kernel)


def _untrusted_note(record: RunRecord) -> str:
    """" N kernels matched the reference but were not trusted: <labels>; not counted." or ""."""
    flagged = [v for _, v in record.candidates if v is not None and v.passed and not v.trusted]
    if not flagged:
        return ""
    labels = "; ".join(dict.fromkeys(f.label for v in flagged for f in v.trust_flags))
    kernels = "kernels matched the reference but were" if len(flagged) > 1 else "kernel matched the reference but was"
    return f" {len(flagged)} {kernels} not trusted: {labels}; not counted."


def _unfinished(status: str) -> str:
    return {"cancelled": "was cancelled", "failed": "failed"}.get(status, "stopped")


def _conclusion_text(best_id: str, d: VerdictDetails, better: str, where: str, kernel: str = "best kernel") -> str:
    s_eager, s_compile = d.timing.speedup_vs_eager, d.timing.speedup_vs_compile
    numbers = f"{_fmt(s_eager)} vs eager, {_fmt(s_compile)} vs torch.compile{where}"
    if s_compile is None:
        if better == "kernel":
            return (f"{kernel.capitalize()} {best_id}: {_fmt(s_eager)} vs eager{where} (torch.compile was not timed, "
                    "so this is a win over eager only).")
        if better == "tie":
            return (f"The {kernel} ({best_id}, {_fmt(s_eager)} vs eager) ties with eager PyTorch; "
                    "keep the PyTorch module.")
        return (f"The {kernel} ({best_id}, {_fmt(s_eager)} vs eager) is not faster than eager PyTorch; "
                "keep the PyTorch module.")
    if better == "kernel":
        return f"{kernel.capitalize()} {best_id}: {numbers}: a win over both, beyond the timing noise."
    if better == "tie":
        return (f"The {kernel} ({best_id}, {numbers}) is a tie with {tie_with(d)}: the difference is within "
                "the timing noise, so it is not a win.")
    if better == "torch.compile":
        return f"torch.compile is the better choice for this module: the {kernel} ({best_id}) runs {numbers}."
    return (f"Eager PyTorch is the better choice for this module (torch.compile does not help either): the {kernel} "
            f"({best_id}) runs {numbers}.")


def run_summary_dict(record: RunRecord) -> dict[str, Any]:
    """The machine-readable summary of a run (``kevin optimize --json``)."""
    conclusion = conclude(record)
    return {
        "run_id": record.run_id,
        "class_name": record.task.class_name,
        "status": record.status,
        "error": record.error,
        "created": record.created,
        "trajectories": record.settings.get("trajectories"),
        "turns": record.settings.get("turns"),
        "best": conclusion.to_dict(),
        "candidates": [row.to_dict() for row in candidate_rows(record)],
    }
