"""In-process vLLM: Kevin-32B in bf16, all conversations of a turn in one ``llm.chat`` call.

vLLM is imported lazily (an optional extra). Without it, or without a CUDA device, constructing the
backend raises EnvironmentProblem with one line saying what to install or use instead.
The model loads on the first ``complete`` call, so a bad setup is reported before any loading.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from typing import Any, Optional

from kevin_agent.backends.base import Backend, BackendInfo, Completion, Message, SamplingParams, TokenCallback
from kevin_agent.config import BackendSettings
from kevin_agent.errors import EnvironmentProblem

NOT_INSTALLED = (
    "vLLM is not installed: pip install 'kevin-agent[vllm]', or use --backend openai --base-url URL"
)
NO_GPU = "vLLM needs a CUDA GPU and none is visible here: use --backend openai --base-url URL"


def llm_kwargs(settings: BackendSettings) -> dict[str, Any]:
    """Arguments of ``vllm.LLM(...)``: Kevin's weights are stored in F32, so serve in bf16."""
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "dtype": "bfloat16",
        "tensor_parallel_size": settings.tensor_parallel_size,
    }
    if settings.max_model_len:
        kwargs["max_model_len"] = settings.max_model_len
    return kwargs


def sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Arguments of ``vllm.SamplingParams(...)`` for one completion per conversation."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
    }
    if params.stop:
        kwargs["stop"] = list(params.stop)
    return kwargs


def chat_conversations(conversations: Sequence[Sequence[Message]]) -> list[list[dict[str, str]]]:
    """Conversations in the shape ``LLM.chat`` takes: a list of lists of role/content dicts."""
    return [[{"role": m.role, "content": m.content} for m in conv] for conv in conversations]


def completion_from_output(output: Any) -> Completion:
    """A Completion from one vLLM ``RequestOutput`` (its first ``CompletionOutput``)."""
    if not output.outputs:
        return Completion(text="", finish_reason="error", error="vLLM returned no output")
    first = output.outputs[0]
    return Completion(
        text=first.text or "",
        finish_reason=first.finish_reason or "stop",
        tokens=len(first.token_ids or ()),
    )


def check_vllm_available() -> None:
    """EnvironmentProblem (one line) when vLLM or a CUDA device is missing."""
    if importlib.util.find_spec("vllm") is None:
        raise EnvironmentProblem(NOT_INSTALLED)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        raise EnvironmentProblem(NO_GPU)


class VLLMBackend(Backend):
    """``vllm.LLM`` in this process; one batched ``chat`` call per turn."""

    name = "vllm"

    def __init__(self, settings: BackendSettings) -> None:
        check_vllm_available()
        self.settings = settings
        self._llm: Any = None
        self._lock = threading.Lock()

    def info(self) -> BackendInfo:
        return BackendInfo(model=self.settings.model,
                           context_tokens=self.settings.max_model_len or 131072)

    def _engine(self) -> Any:
        with self._lock:
            if self._llm is None:
                import vllm

                try:
                    self._llm = vllm.LLM(**llm_kwargs(self.settings))
                except Exception as err:  # weights missing, out of memory, ...
                    line = " ".join(str(err).split())[:300]
                    raise EnvironmentProblem(
                        f"vLLM could not load {self.settings.model}: {line}"
                    ) from None
            return self._llm

    def complete(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback] = None,
    ) -> list[Completion]:
        if not conversations:
            return []
        import vllm

        llm = self._engine()
        try:
            outputs = llm.chat(
                chat_conversations(conversations),
                vllm.SamplingParams(**sampling_kwargs(params)),
                use_tqdm=False,
            )
        except Exception as err:  # e.g. a prompt longer than max_model_len
            line = "vLLM failed: " + " ".join(str(err).split())[:300]
            return [Completion(text="", finish_reason="error", error=line) for _ in conversations]
        completions = [completion_from_output(output) for output in outputs]
        if on_tokens is not None:
            for index, completion in enumerate(completions):
                on_tokens(index, completion.tokens)
        return completions
