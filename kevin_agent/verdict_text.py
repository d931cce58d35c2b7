"""The one plain-text rendering of a verdict for people (the model gets ``verdict.message``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from kevin_agent.data import REPLAY_GPU_NAME, TimingStats, Verdict, VerdictDetails
from kevin_agent.safe_text import terminal_safe

if TYPE_CHECKING:
    from kevin_agent.run_record import RunRecord


def is_replayed(details: VerdictDetails) -> bool:
    """A recorded verdict served again (``--evaluator replay:FILE``), not measured here.
    (Runs stored before ``replayed`` existed only carry ``gpu_name="replay"``.)"""
    return details.environment.replayed or details.environment.gpu_name == REPLAY_GPU_NAME


def measured_label(details: VerdictDetails) -> Optional[str]:
    """Where a verdict's numbers come from, as every face says it: "NVIDIA H200", or for a replayed
    verdict "measured on NVIDIA H200 in run X, replayed here"; None when no GPU is known."""
    if not is_replayed(details):
        return details.environment.gpu_name or None
    gpu = details.environment.gpu_name if details.environment.gpu_name not in (None, "", REPLAY_GPU_NAME) else None
    run = f" in run {details.environment.measured_in}" if details.environment.measured_in else ""
    if gpu is None:
        return f"recorded{run} with no GPU named, replayed here"
    return f"measured on {gpu}{run}, replayed here"


def gpu_short(details: VerdictDetails) -> Optional[str]:
    """The GPU in a short label (commit subject, code lens, header): "NVIDIA H200", or
    "NVIDIA H200, replayed" for a recorded verdict ("replay" when it names no GPU); None when no
    GPU is known."""
    if not is_replayed(details):
        return details.environment.gpu_name or None
    gpu = details.environment.gpu_name if details.environment.gpu_name not in (None, "", REPLAY_GPU_NAME) else None
    return f"{gpu}, replayed" if gpu else REPLAY_GPU_NAME


def untrusted_label(verdict: Verdict, short: bool = False) -> Optional[str]:
    """"not trusted: <reason>" as every face shows an untrusted verdict (the checks' short labels
    when ``short``, for table cells and one-line states); None when the verdict is trusted."""
    flags = verdict.trust_flags
    if not flags:
        return None
    parts = [f.label if short else f.reason for f in flags]
    return "not trusted: " + "; ".join(dict.fromkeys(parts))


def replay_note(record: RunRecord, conclusion: str = "") -> Optional[str]:
    """One line for a run whose verdicts were replayed, to show under its ``conclusion`` (None when
    they were measured here, or when the conclusion already says they were replayed)."""
    replayed = [v.details for _, v in record.candidates if v is not None and is_replayed(v.details)]
    if not replayed or "replayed" in conclusion:
        return None
    sources = sorted({label for label in map(measured_label, replayed) if label})
    return ("Recorded verdicts, not measured on this machine: " + "; ".join(sources) + ".")


def _ms(stats: TimingStats | None) -> str | None:
    if stats is None:
        return None
    return f"{stats.median_ms:.4g} ms (IQR {stats.iqr_ms:.2g} ms, {stats.spread:.1%}; {stats.trials} trials)"


def render_verdict(verdict: Verdict, with_errors: bool = True) -> str:
    """A readable, plain-text verdict: ``kevin eval``, ``kevin show`` and the terminal UI."""
    d = verdict.details
    status = "passed" if verdict.ok else "FAILED"
    replayed = "  [replayed: not measured here]" if is_replayed(d) else ""
    trust = "  NOT TRUSTED" if not verdict.trusted else ""
    lines = [f"stage: {verdict.stage.value} ({status}){'  correct' if verdict.correct else ''}{trust}{replayed}",
             "", verdict.message, ""]
    if d.static_rule:
        lines.append(f"static rule: {d.static_rule}")
    c, t = d.correctness, d.timing
    if c.trials_total is not None:
        lines.append(f"correctness: {c.trials_passed}/{c.trials_total} trials passed")
    if c.max_abs_error is not None:
        lines.append(f"errors: max abs {c.max_abs_error:.3g}, max rel {(c.max_rel_error or 0):.3g}"
                     + (f" (atol {c.atol:g}, rtol {c.rtol:g})" if c.atol is not None and c.rtol is not None else ""))
    if c.error_vs_fp64 is not None:
        lines.append(fp64_line(d))
    lines += provenance_lines(d)
    for label, stats in (("kernel", t.kernel), ("eager", t.eager), ("torch.compile", t.compiled)):
        if _ms(stats):
            lines.append(f"{label}: {_ms(stats)}")
    if t.torch_compile_seconds is not None:
        lines.append(f"torch.compile build: {t.torch_compile_seconds:.1f} s")
    if t.speedup_vs_eager is not None:
        vs_compile = f", {t.speedup_vs_compile:.2f}x vs torch.compile" if t.speedup_vs_compile is not None else ""
        lines.append(f"speedup: {t.speedup_vs_eager:.2f}x vs eager{vs_compile}")
    if t.sol_fraction is not None:
        sol_ms = f" of peak ({t.sol_ms:.4g} ms at speed of light)" if t.sol_ms is not None else ""
        lines.append(f"speed of light: {t.sol_fraction:.1%}{sol_ms}")
    untrusted = untrusted_label(verdict)
    if untrusted:
        lines.append(f"{untrusted} (counts as not correct: no reward, never a best)")
    if d.build.seconds is not None:
        hit = "cache hit" if d.build.cache_hit else "built"
        lines.append(f"build: {d.build.seconds:.2f} s ({hit}{', ' + d.build.path if d.build.path else ''})")
    if d.build.log_path:
        lines.append(f"build log: {d.build.log_path}")
    if d.environment.gpu_name:
        lines.append(_gpu_line(verdict))
    if d.environment.sandbox:
        lines.append(f"sandbox: {d.environment.sandbox}")
    if with_errors:
        for title, text in (("compiler errors", d.build.compiler_errors), ("error", d.error)):
            if text and text.strip() not in verdict.message:
                lines += ["", f"{title}:", text.rstrip()]
    return terminal_safe("\n".join(lines).rstrip() + "\n")  # details set after the verdict was made, too


def fp64_line(d: VerdictDetails) -> str:
    """The candidate's error and eager's own, both against a float64 run of the reference."""
    c = d.correctness
    own = f" (eager's own {c.reference_error_vs_fp64:.3g})" if c.reference_error_vs_fp64 is not None else ""
    rms = ""
    if c.rms_error_vs_fp64 is not None and c.reference_rms_error_vs_fp64 is not None:
        rms = f", RMS {c.rms_error_vs_fp64:.3g} (eager's own {c.reference_rms_error_vs_fp64:.3g})"
    rule = "; passed by the float64 rule" if c.fp64_accepted else ""
    return f"against float64: max abs {c.error_vs_fp64:.3g}{own}{rms}{rule}"


def provenance_lines(d: VerdictDetails, limit: int = 5) -> list[str]:
    """The provenance verdict and the top kernels by GPU time (own vs foreign), for people."""
    lines = []
    p = d.provenance
    if p.summary:
        lines.append(p.summary)
    elif p.own_share is not None:
        lines.append(f"provenance {p.policy or ''}: own kernels {p.own_share:.1%}".replace("  ", " "))
    rows = p.kernels or []
    if rows:
        total = sum(float(r.get("ms") or 0.0) for r in rows)
        head = f"kernels (top {min(limit, len(rows))} of {len(rows)}, {total:.3f} ms of GPU time):"
        lines.append(head if len(rows) > limit else f"kernels ({total:.3f} ms of GPU time):")
        for row in rows[:limit]:
            origin = str(row.get("origin", "?"))
            role = row.get("role")
            if origin != "own" and role and role != "compute":
                origin += f"/{role}"
            lines.append(f"  {float(row.get('share') or 0.0):6.1%}  {float(row.get('ms') or 0.0):8.3f} ms  "
                         f"{int(row.get('calls') or 0):>4}x  {origin:<14} {kernel_label(str(row.get('name', '')))}")
    return lines


def kernel_label(name: str, limit: int = 80) -> str:
    """A profiled kernel name without ``void`` and its parameter list, cut to ``limit``."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "<"
        depth -= ch == ">" and depth > 0
        if ch == "(" and depth == 0 and i > 0 and not text.startswith("(anonymous namespace)", i) \
                and not text.startswith(("Memcpy", "Memset")):
            text = text[:i]
            break
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _gpu_line(verdict: Verdict) -> str:
    d = verdict.details
    if is_replayed(d):
        return f"gpu: {measured_label(d)} (a recorded verdict, not measured on this machine)"
    versions = ", ".join(x for x in (f"torch {d.environment.torch_version}" if d.environment.torch_version else "",
                                     f"CUDA {d.environment.cuda_version}" if d.environment.cuda_version else "") if x)
    return f"gpu: {d.environment.gpu_name}" + (f" ({versions})" if versions else "")
