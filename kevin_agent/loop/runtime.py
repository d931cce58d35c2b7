"""What the session needs from its surroundings: a cancellable backend call, the context budget,
a token counter, and the target GPU's name."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from kevin_agent.backends.base import Backend, Completion, SamplingParams, TokenCallback
from kevin_agent.data import Message
from kevin_agent.errors import KevinError
from kevin_agent.evaluate.api import Evaluator
from kevin_agent.loop.settings import RunSettings

MIN_PROMPT_BUDGET = 4096


class StepFailed(Exception):
    """A backend or evaluator failure that ends the run (carries the one-line error)."""

    def __init__(self, error: KevinError) -> None:
        super().__init__(str(error))
        self.error = error


def complete_cancellable(
    backend: Backend,
    conversations: Sequence[Sequence[Message]],
    params: SamplingParams,
    on_tokens: Optional[TokenCallback],
    cancel: threading.Event,
    poll_s: float = 0.05,
) -> Optional[list[Completion]]:
    """``backend.complete`` in a helper thread; None as soon as ``cancel`` is set (reply dropped)."""
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def call() -> None:
        try:
            outcome["completions"] = backend.complete(conversations, params, on_tokens)
        except BaseException as err:  # reported to the session as a one-line failure
            outcome["error"] = err
        finally:
            finished.set()

    threading.Thread(target=call, name="kevin-backend", daemon=True).start()
    while not finished.wait(poll_s):
        if cancel.is_set():
            backend.cancel()
            return None
    if cancel.is_set():
        return None
    error = outcome.get("error")
    if isinstance(error, KevinError):
        raise StepFailed(error)
    if error is not None:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise StepFailed(KevinError(
            f"the {backend.name} backend failed: "
            f"{type(error).__name__}: {first_line}"))
    return list(outcome["completions"])


def context_budget(backend: Backend, settings: RunSettings) -> int:
    """Prompt tokens available: the model's context minus the tokens reserved for the reply."""
    context = settings.backend.max_model_len or backend.info().context_tokens
    return max(int(context) - int(settings.backend.max_tokens), MIN_PROMPT_BUDGET)


def token_counter(backend: Backend, settings: RunSettings) -> Callable[[str], int]:
    """The backend's tokenizer when it offers one, else the model's local tokenizer, else a
    conservative estimate (tokens.make_token_counter never downloads)."""
    counter = backend.token_counter()
    if counter is not None:
        return counter
    from kevin_agent.tokens import make_token_counter

    return make_token_counter(settings.backend.model)


def target_gpu_name(evaluator: Evaluator, settings: RunSettings) -> str:
    """The GPU named in prompts: the run's setting, else the evaluator's device (not a replay),
    else the backend's ``target_gpu`` setting, else a generic name."""
    from kevin_agent.prompts import target_gpu_name as prompt_gpu_name

    device = None if evaluator.replayed else evaluator.gpu_name
    return prompt_gpu_name(settings.gpu_name or device, settings.backend.target_gpu)
