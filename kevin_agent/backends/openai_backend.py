"""Any OpenAI-compatible chat endpoint (``backends.serve.SERVE_COMMAND`` by default).

Bounded concurrency, retries with exponential backoff and jitter on 429 / 5xx / connection errors,
request timeouts, streamed token counts, vLLM's separate reasoning field. A request that fails for
good comes back as ``Completion(error=...)`` (``server_down`` when retrying did not help: the
session then stops the run); each retry round is reported once through ``on_retry``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from kevin_agent.backends.base import (
    DEFAULT_CONTEXT_TOKENS,
    Backend,
    BackendInfo,
    Completion,
    Message,
    SamplingParams,
    TokenCallback,
)
from kevin_agent.config import BackendSettings

RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_BACKOFF_S = 60.0
REPORT_EVERY_TOKENS = 16  # streamed progress: report at most every 16 tokens (and at the end)


class _Cancelled(Exception):
    pass


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def error_line(err: BaseException, base_url: str) -> str:
    """One line for the user from an SDK exception, using vLLM's / OpenAI's error body."""
    import openai

    if isinstance(err, openai.APIStatusError):
        body = err.body if isinstance(err.body, dict) else {}
        error = body.get("error")
        inner = error if isinstance(error, dict) else body
        message = inner.get("message") or err.message
        return _one_line(f"HTTP {err.status_code} from {base_url}: {message}")
    if isinstance(err, openai.APITimeoutError):
        return _one_line(f"request to {base_url} timed out")
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err
        return _one_line(f"cannot reach {base_url}: {cause}")
    return _one_line(f"{type(err).__name__}: {err}")


def what_to_check(err: BaseException) -> str:
    """The one thing to check for a request that failed for good."""
    import openai

    status = err.status_code if isinstance(err, openai.APIStatusError) else None
    if status in (401, 403):
        return "check the API key (KEVIN_API_KEY or OPENAI_API_KEY)"
    if status == 404:
        return "check the model name (--model, KEVIN_MODEL) and that the URL ends in /v1"
    if isinstance(err, openai.APITimeoutError):
        return "check the server's load, or raise timeout_s in kevin.toml"
    if isinstance(err, openai.APIConnectionError):
        from kevin_agent.backends.serve import SERVE_COMMAND

        return (f"check that the server runs there (e.g. `{SERVE_COMMAND}`) and the URL "
                "(--base-url, KEVIN_BASE_URL)")
    return "check the server's log"


def _retryable(err: BaseException) -> bool:
    import openai

    if isinstance(err, openai.APIStatusError):
        return err.status_code in RETRY_STATUSES
    return isinstance(err, openai.APIError)  # connection errors, timeouts, errors mid-stream


def _retry_after(err: BaseException) -> float | None:
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _reasoning_of(obj: Any) -> str:
    """vLLM's reasoning text (``reasoning_content``; ``reasoning`` in newer vLLM)."""
    for key in ("reasoning_content", "reasoning"):
        value = getattr(obj, key, None)
        if value is None and getattr(obj, "model_extra", None):
            value = obj.model_extra.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


class OpenAIBackend(Backend):
    """Chat completions over HTTP with the ``openai`` SDK."""

    name = "openai"

    def __init__(self, settings: BackendSettings, *, backoff_base_s: float = 1.0) -> None:
        import openai

        self.settings = settings
        self.base_url = settings.resolved_base_url
        self.backoff_base_s = backoff_base_s
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=settings.api_key or "EMPTY",
            timeout=settings.timeout_s,
            max_retries=0,  # retries are ours: backoff with jitter, and errors as data
        )
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self._cancel = threading.Event()
        self._info: BackendInfo | None = None
        self._retry_lock = threading.Lock()
        self._retries_reported: set[int] = set()  # retry rounds already reported in this batch

    def cancel(self) -> None:
        """Abort requests in flight; they return Completion(error="cancelled")."""
        self._cancel.set()

    def info(self) -> BackendInfo:
        """Model name and context length (vLLM reports ``max_model_len`` in /v1/models)."""
        if self._info is None:
            context = self.settings.max_model_len or DEFAULT_CONTEXT_TOKENS
            try:
                for model in self._client.models.list().data:
                    served = (model.model_extra or {}).get("max_model_len")
                    if model.id == self.settings.model and isinstance(served, int):
                        context = served
            except Exception:  # an endpoint without /models: keep the setting or the default
                pass
            self._info = BackendInfo(model=self.settings.model, context_tokens=context)
        return self._info

    def complete(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback] = None,
    ) -> list[Completion]:
        self._cancel.clear()
        self._retries_reported.clear()
        if not conversations:
            return []
        workers = min(len(conversations), max(self.settings.concurrency, 1), 64)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kevin-openai") as pool:
            futures = [
                pool.submit(self._complete_one, index, conversation, params, on_tokens)
                for index, conversation in enumerate(conversations)
            ]
            return [future.result() for future in futures]

    def _complete_one(
        self,
        index: int,
        conversation: Sequence[Message],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback],
    ) -> Completion:
        attempts = self.settings.max_retries + 1
        for attempt in range(attempts):
            try:
                with self._slots:
                    if self._cancel.is_set():
                        raise _Cancelled()
                    return self._request(index, conversation, params, on_tokens)
            except _Cancelled:
                return Completion(text="", finish_reason="cancelled", error="cancelled")
            except Exception as err:  # every failure becomes data
                if not _retryable(err) or attempt == attempts - 1:
                    return self._failed(err, attempt + 1)
                delay = self._backoff(attempt, _retry_after(err))
                self._report_retry(attempt, err, delay)
                if self._cancel.wait(delay):
                    return Completion(text="", finish_reason="cancelled", error="cancelled")
        raise AssertionError("unreachable")

    def _failed(self, err: Exception, attempts: int) -> Completion:
        """A request that failed for good: what failed, the URL, what to check; ``server_down``
        when retrying did not help (the server, not this request, is the problem)."""
        suffix = f" after {attempts} attempts" if attempts > 1 else ""
        return Completion(text="", finish_reason="error", server_down=_retryable(err),
                          error=f"{error_line(err, self.base_url)}{suffix}; {what_to_check(err)}")

    def _report_retry(self, attempt: int, err: Exception, delay: float) -> None:
        """One progress line per retry round (not per request of the batch)."""
        with self._retry_lock:
            if attempt in self._retries_reported or self.on_retry is None:
                return
            self._retries_reported.add(attempt)
        self.on_retry(f"model server: {error_line(err, self.base_url)}; retry {attempt + 1} of "
                      f"{self.settings.max_retries} in {delay:.0f} s")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with full jitter; a server's Retry-After is honoured (capped)."""
        delay = self.backoff_base_s * (2**attempt) * random.uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)

    def _request_args(self, conversation: Sequence[Message], params: SamplingParams) -> dict[str, Any]:
        args: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [{"role": m.role, "content": m.content} for m in conversation],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if params.stop:
            args["stop"] = list(params.stop)
        return args

    def _request(
        self,
        index: int,
        conversation: Sequence[Message],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback],
    ) -> Completion:
        args = self._request_args(conversation, params)
        if not self.settings.stream:
            response = self._client.chat.completions.create(**args)
            choice = response.choices[0]
            tokens = response.usage.completion_tokens if response.usage else 0
            if on_tokens is not None:
                on_tokens(index, tokens)
            return Completion(
                text=choice.message.content or "",
                reasoning=_reasoning_of(choice.message),
                finish_reason=choice.finish_reason or "stop",
                tokens=tokens,
            )
        return self._stream(index, args, on_tokens)

    def _stream(self, index: int, args: dict[str, Any], on_tokens: Optional[TokenCallback]) -> Completion:
        stream = self._client.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        reasoning: list[str] = []
        finish_reason = "stop"
        chunks = 0
        reported = 0
        usage_tokens: int | None = None
        try:
            for chunk in stream:
                if self._cancel.is_set():
                    raise _Cancelled()
                if getattr(chunk, "usage", None) is not None and chunk.usage.completion_tokens:
                    usage_tokens = chunk.usage.completion_tokens
                for choice in chunk.choices or []:
                    piece = choice.delta.content if choice.delta else None
                    thought = _reasoning_of(choice.delta) if choice.delta else ""
                    if piece:
                        text.append(piece)
                    if thought:
                        reasoning.append(thought)
                    if piece or thought:
                        chunks += 1
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                if on_tokens is not None and chunks - reported >= REPORT_EVERY_TOKENS:
                    reported = chunks
                    on_tokens(index, chunks)
        finally:
            stream.close()
        tokens = usage_tokens if usage_tokens is not None else chunks
        if on_tokens is not None:
            on_tokens(index, tokens)
        return Completion(
            text="".join(text), reasoning="".join(reasoning), finish_reason=finish_reason,
            tokens=tokens,
        )
