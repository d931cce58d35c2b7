"""Verdicts the parent side makes itself: cancelled placeholders, static failures, build numbers."""

from __future__ import annotations

from typing import Optional

from kevin_agent import feedback
from kevin_agent.data import BuildRecord, Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.build.compile import CompileOutcome


def cancelled_verdict(stage: Stage) -> Verdict:
    """Placeholder for a candidate the user cancelled before it was judged (not a real verdict)."""
    return Verdict(stage, False, "The evaluation was cancelled before this answer was judged.",
                   VerdictDetails(error="cancelled"))


def static_verdict(code: str, task_source: Optional[str] = None) -> Optional[Verdict]:
    """The STATIC failure for ``code``, or None when the static checks pass.

    ``task_source`` names the reference's classes, so using or subclassing any of them is caught.
    """
    from kevin_agent.evaluate.source.ast_lock import PARSE_LOCK
    from kevin_agent.evaluate.static.checks import check_candidate, format_violations

    with PARSE_LOCK:  # the static stage parses; batches side by side must not parse at once
        violations = check_candidate(code, task_source)
    if not violations:
        return None
    text = format_violations(violations)
    if len(violations) > 1:  # a count, then one problem per line (no dangling "compiling: " line)
        text = f"{len(violations)} problems.\n{text}"
    return Verdict(Stage.STATIC, False, feedback.static_error(text),
                   VerdictDetails(static_rule=violations[0].rule))


def build_details(outcome: CompileOutcome) -> VerdictDetails:
    """Build numbers of a compile: total seconds, all cache hits, the failing (or first) log."""
    results = outcome.results
    failing = next((r for r in results if not r.ok), None)
    shown = failing or (results[0] if results else None)
    return VerdictDetails(build=BuildRecord(
        seconds=round(sum(r.seconds for r in results), 3) if results else None,
        cache_hit=all(r.cache_hit for r in results) if results else None,
        log_path=shown.log_path if shown else None,
        path=shown.path if shown else None,
        compiler_errors=failing.errors if failing else None,
    ))


def merge_build_details(verdict: Verdict, build: VerdictDetails) -> Verdict:
    """Fill the build fields the worker left empty (its compiler errors stay its own)."""
    verdict.details.build.fill_from(build.build)
    return verdict


def compile_verdict(outcome: CompileOutcome, details: VerdictDetails) -> Verdict:
    """The COMPILE verdict of a failed build (or of a compile-only evaluation)."""
    if outcome.ok:
        return Verdict(Stage.COMPILE, True, feedback.compiled_only(), details)
    message = outcome.message or feedback.compile_error(details.build.compiler_errors or "unknown error")
    return Verdict(Stage.COMPILE, False, message, details)
