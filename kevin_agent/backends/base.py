"""The model backend protocol: conversations in, completions out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


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


TokenCallback = Callable[[int, int], None]  # (conversation index, tokens so far)


class Backend(Protocol):
    """One call: a batch of conversations, one completion each, same order."""

    name: str

    def complete(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback] = None,
    ) -> list[Completion]: ...


@dataclass
class BackendInfo:
    """What the prompt builder needs to know about the model behind a backend."""

    model: str = ""
    context_tokens: int = 32768
    extra: dict[str, str] = field(default_factory=dict)
