"""The commit message of an accepted kernel: measured numbers up front, trailers for undo/find."""

from __future__ import annotations

import textwrap
from typing import Any, Optional

from kevin_agent.data import REPLAY_GPU_NAME, Candidate, TimingStats, Verdict, VerdictDetails
from kevin_agent.run_table import better_choice, plural, speedup_text, tie_with
from kevin_agent.verdict_text import gpu_short, is_replayed, measured_label, untrusted_label

RUN_TRAILER = "Kevin-Run"
CANDIDATE_TRAILER = "Kevin-Candidate"
REVERT_TRAILER = "Kevin-Revert"


def _x(value: Optional[float]) -> str:
    return speedup_text(value, "n/a")


def subject(class_name: str, verdict: Verdict) -> str:
    """``kevin: CUDA kernel for FusedBlock (1.84x eager, 1.21x torch.compile, NVIDIA H200)``."""
    details = verdict.details
    untrusted = untrusted_label(verdict, short=True)
    if untrusted:  # its numbers are not believed (accepted with --force): say that instead of them
        parts = [untrusted]
    else:
        parts = [f"{_x(details.timing.speedup_vs_eager)} eager"]
        if details.timing.speedup_vs_compile is not None:
            parts.append(f"{_x(details.timing.speedup_vs_compile)} torch.compile")
        if better_choice(details) == "tie":
            parts.append(f"a tie with {tie_with(details)}")
    parts.append(gpu_short(details) or "unknown GPU")
    return f"kevin: CUDA kernel for {class_name} ({', '.join(parts)})"


def _ms(stats: Optional[TimingStats]) -> Optional[str]:
    return None if stats is None else f"{stats.median_ms:.3f} ms"


def _search_line(settings: dict[str, Any]) -> str:
    trajectories, turns = settings.get("trajectories"), settings.get("turns")
    if trajectories is None or turns is None:
        return ""
    text = f" ({plural(trajectories, 'trajectory')} x {plural(turns, 'turn')}"
    if settings.get("beam_keep"):
        text += f", beam keeping {settings['beam_keep']}"
    return text + ")"


def _correctness_line(verdict: Verdict) -> str:
    c = verdict.details.correctness
    trials = f"{c.trials_passed}/{c.trials_total} trials" if c.trials_total is not None else "passed"
    tolerances = []
    if c.atol is not None:
        tolerances.append(f"atol {c.atol:g}")
    if c.rtol is not None:
        tolerances.append(f"rtol {c.rtol:g}")
    line = f"{trials} on fresh random inputs"
    if is_replayed(verdict.details):
        line += " (recorded, replayed here)"
    if tolerances:
        line += ", " + ", ".join(tolerances)
    if c.max_abs_error is not None:
        line += f" (max abs error {c.max_abs_error:.2g})"
    return line


def _timing_line(verdict: Verdict) -> Optional[str]:
    t = verdict.details.timing
    pieces = [f"{label} {ms}" for label, ms in
              (("kernel", _ms(t.kernel)), ("eager", _ms(t.eager)), ("torch.compile", _ms(t.compiled)))
              if ms is not None]
    if not pieces:
        return None
    trials = t.kernel.trials if t.kernel is not None else None
    return ", ".join(pieces) + (f" (median of {trials} trials)" if trials else "")


def _verdict_note(verdict: Verdict) -> Optional[str]:
    d = verdict.details
    where = "where it was measured" if is_replayed(d) else (
        f"on {d.environment.gpu_name}" if d.environment.gpu_name else "on the GPU it was measured on")
    if better_choice(d) == "tie":
        return (f"Note: this kernel ties with {tie_with(d)} {where}: the difference is within the "
                "timing noise (95% intervals of the medians overlap, or under 2%).")
    vs_eager, vs_compile = d.timing.speedup_vs_eager, d.timing.speedup_vs_compile
    if vs_eager is not None and vs_eager <= 1.0:
        also = " or torch.compile" if vs_compile is not None and vs_compile <= 1.0 else ""
        return f"Note: this kernel is not faster than eager PyTorch{also} {where}."
    if vs_compile is not None and vs_compile <= 1.0:
        return (f"Note: torch.compile is faster than this kernel {where} "
                f"({_x(vs_compile)} vs torch.compile); it beats eager only.")
    return None


def _environment_line(d: VerdictDetails) -> str:
    env = d.environment
    gpu = env.gpu_name if env.gpu_name and env.gpu_name != REPLAY_GPU_NAME else None
    line = ", ".join([gpu or "unknown GPU", f"torch {env.torch_version or 'unknown'}",
                      f"CUDA {env.cuda_version or 'unknown'}"])
    if is_replayed(d):
        line += f" (measured in run {env.measured_in}, replayed here)" if env.measured_in else " (replayed here)"
    return line


def _intro(source_label: str, verdict: Verdict) -> str:
    d = verdict.details
    if is_replayed(d):
        return (f"Drop-in CUDA replacement for {source_label}, written by the Kevin model. Verdict "
                f"{measured_label(d)}: kevin-agent did not check or time it against the original "
                "module on this machine. Run the generated test on a GPU.")
    return (f"Drop-in CUDA replacement for {source_label}, written by the Kevin model and "
            f"verified by kevin-agent on the GPU against the original module.")


def commit_message(*, class_name: str, source_label: str, run_id: str, candidate: Candidate,
                   verdict: Verdict, settings: dict[str, Any], paths: list[str]) -> str:
    d = verdict.details
    rows: list[tuple[str, Optional[str]]] = [
        ("Run", f"{run_id}{_search_line(settings)}"),
        ("Candidate", f"{candidate.id} (trajectory {candidate.trajectory}, turn {candidate.turn})"),
        ("Correctness", _correctness_line(verdict)),
        ("Timing", _timing_line(verdict)),
        ("Speed of light", None if d.timing.sol_fraction is None else f"{d.timing.sol_fraction:.0%} of the GPU's peak"),
        ("Environment", _environment_line(d)),
    ]
    width = max(len(label) for label, _ in rows) + 2
    body = [f"{(label + ':').ljust(width)}{value}" for label, value in rows if value]
    intro = _intro(source_label, verdict)
    files = "Files:\n" + "\n".join(f"  {path}" for path in paths)
    note = _verdict_note(verdict)
    untrusted = untrusted_label(verdict)
    warning = (f"WARNING: {untrusted}. Accepted with --force: the evaluator does not trust this "
               "result, so its numbers are not believed and it earned no reward." if untrusted else None)
    paragraphs = [intro] + [text for text in (warning, note) if text]
    wrapped = [textwrap.fill(text, 72, break_on_hyphens=False) for text in paragraphs]
    parts = [subject(class_name, verdict), wrapped[0], "\n".join(body), *wrapped[1:], files]
    trailers = f"{RUN_TRAILER}: {run_id}\n{CANDIDATE_TRAILER}: {candidate.id}"
    return "\n\n".join(parts + [trailers]) + "\n"


def trailers(message: str) -> dict[str, str]:
    """``Key: value`` lines of the message's last paragraph."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    found: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found
