"""Kevin's feedback wording for the model, one function per evaluation outcome (KEVIN.md).

Every text the candidate controls (compiler errors, what it raised or printed, its names) passes
through ``safe_text.candidate_text`` here: at most a few KB, control characters spelled out.
"""

from __future__ import annotations

from kevin_agent.safe_text import candidate_text


def format_error(problem: str) -> str:
    return f"Your answer could not be parsed (format error): {candidate_text(problem)}"


def static_error(reason: str) -> str:
    return f"Your answer was rejected by the static checks before compiling: {candidate_text(reason)}"


def compile_error(errors: str) -> str:
    return f"Your answer failed to compile. Compiler errors:\n{candidate_text(errors.strip())}"


def runtime_error(error: str) -> str:
    return f"Your answer compiled but raised an error at run time:\n{candidate_text(error.strip())}"


def incorrect(mismatch: str) -> str:
    return f"Your answer was incorrect: {candidate_text(mismatch.strip())}"


def correct(speedup: float) -> str:
    return (
        f"Your answer was correct, with a speedup of {speedup:.2f}x over the PyTorch baseline "
        "(eager). It can be made faster."
    )


def untrusted(reasons: list[str]) -> str:
    """A candidate whose outputs matched but whose result the evaluator cannot trust: what tripped,
    and that it counts as incorrect (no reward)."""
    why = candidate_text("; ".join(r.strip().rstrip(".") for r in reasons if r.strip())) or "flagged by the evaluator"
    return (f"Your answer was not trusted, so it counts as incorrect and earned nothing: {why}. "
            "Its outputs matched, but the evaluator could not verify how they were computed or timed. "
            "Do all of the work in your own CUDA kernels on the current stream.")


def correct_untimed() -> str:
    return "Your answer was correct; it was not timed."


def compiled_only() -> str:
    return "Your answer compiled; it was not run."


def cut_off(tokens: int) -> str:
    """Added to the evaluation of an answer whose reply hit the generation limit after its code."""
    limit = f" ({tokens} tokens)" if tokens else ""
    return (f"Your reply was cut off at the generation limit{limit}; the last complete code block "
            "was evaluated. Reason more briefly and leave room for the whole answer.")
