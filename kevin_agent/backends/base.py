"""The model backend seam: conversations in, completions out (``Backend``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional

from kevin_agent.data import Message

__all__ = ["Backend", "BackendInfo", "Completion", "Message", "SamplingParams", "TokenCallback"]


@dataclass(frozen=True)
class SamplingParams:
    """Kevin's paper samples at temperature 0.9; responses run 16k-22k tokens."""

    temperature: float = 0.9
    top_p: float = 1.0
    max_tokens: int = 16384
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completion:
    text: str  # the visible answer (may contain <think>...</think> inline)
    reasoning: str = ""  # separate reasoning (vLLM's reasoning_content), when the server splits it
    finish_reason: str = "stop"  # "stop" | "length" | ...
    tokens: int = 0  # completion tokens
    error: Optional[str] = None  # one line when this request failed for good
    server_down: bool = False  # the server itself failed (unreachable, 5xx, timeouts after retries): ends the run


DEFAULT_CONTEXT_TOKENS = 32768  # when neither the settings nor the server say
TokenCallback = Callable[[int, int], None]  # (conversation index, tokens so far)
TokenCounter = Callable[[str], int]


@dataclass
class BackendInfo:
    """What the prompt builder needs to know about the model behind a backend."""

    model: str = ""
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    extra: dict[str, str] = field(default_factory=dict)


class Backend(ABC):
    """One call: a batch of conversations, one completion each, same order.

    Every other capability has a default: ``info`` (the model's context), ``token_counter``
    (None: count with a local tokenizer), ``cancel`` (abort requests in flight) and ``close``.
    """

    name: str = "backend"
    on_retry: Optional[Callable[[str], None]] = None  # one line per retry round, for progress

    @abstractmethod
    def complete(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback] = None,
    ) -> list[Completion]:
        """One completion per conversation; a failed request is ``Completion(error=...)``."""

    def info(self) -> BackendInfo:
        """The model and its context length."""
        return BackendInfo()

    def token_counter(self) -> Optional[TokenCounter]:
        """The model's own token counter, when the backend has one."""
        return None

    def cancel(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Abort requests in flight (they return errors); nothing to abort by default."""

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op unless overridden
        """Release connections or engines; nothing to release by default."""
