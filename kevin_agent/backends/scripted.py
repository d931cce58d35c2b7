"""A backend that replays recorded responses from a JSON file (tests, demos, re-evaluation).

File: ``{"responses": [{"trajectory": 0, "turn": 0, "text": ..., "reasoning": ...,
"finish_reason": "stop"}, ...]}``. A response with trajectory and turn answers exactly that
position; one without them is served in order to any position that has no keyed response.
Optional per response: ``tokens`` (default: whitespace-separated words of text + reasoning),
``error`` (a failed request), ``delay_s`` (sleep before answering, for progress and cancel demos).

The position of a conversation: trajectory = its index in the batch; turn = the number of earlier
attempts its prompt carries (prompts.attempts_in_prompt), so resumed runs replay correctly.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from kevin_agent.backends.base import Backend, BackendInfo, Completion, Message, SamplingParams, TokenCallback
from kevin_agent.errors import UserInputError
from kevin_agent.prompts import attempts_in_prompt

_FIELDS = {"trajectory", "turn", "text", "reasoning", "finish_reason", "tokens", "error", "delay_s"}


def _validate(raw: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(raw, dict) or not isinstance(raw.get("responses"), list):
        raise UserInputError(f'{path}: expected a JSON object {{"responses": [...]}}')
    responses = raw["responses"]
    for number, item in enumerate(responses):
        where = f"{path}: response {number}"
        if not isinstance(item, dict):
            raise UserInputError(f"{where}: expected an object")
        unknown = set(item) - _FIELDS
        if unknown:
            raise UserInputError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        if not isinstance(item.get("text", ""), str) or not isinstance(item.get("reasoning", ""), str):
            raise UserInputError(f"{where}: text and reasoning must be strings")
        if "text" not in item and "error" not in item:
            raise UserInputError(f"{where}: needs a 'text' (or an 'error')")
        for key in ("trajectory", "turn", "tokens"):
            value = item.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UserInputError(f"{where}: {key} must be a whole number")
        if ("trajectory" in item) != ("turn" in item):
            raise UserInputError(f"{where}: give both trajectory and turn, or neither")
    return responses


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """The responses of a script file; UserInputError (one line) when missing or malformed."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(f"{path}: script file not found") from None
    except OSError as err:
        raise UserInputError(f"{path}: cannot read script file: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: not valid JSON: {err}") from None
    return _validate(raw, path)


class ScriptedBackend(Backend):
    """Replays a script; running out of responses gives Completion(error=...), never raises."""

    name = "scripted"

    def __init__(self, script: str | Path | list[dict[str, Any]], model: str = "scripted") -> None:
        if isinstance(script, list):
            responses = _validate({"responses": script}, Path("<script>"))
        else:
            responses = load_script(script)
        self.model = model
        self._keyed = {(r["trajectory"], r["turn"]): r for r in responses if "trajectory" in r}
        self._ordered = deque(r for r in responses if "trajectory" not in r)
        self._lock = threading.Lock()
        self._calls = 0
        self.requests: list[list[list[Message]]] = []  # every batch received, for tests

    def info(self) -> BackendInfo:
        return BackendInfo(model=self.model, context_tokens=131072)

    def _next(self, trajectory: int, turn: int) -> dict[str, Any] | None:
        with self._lock:
            keyed = self._keyed.get((trajectory, turn))
            if keyed is not None:
                return keyed
            return self._ordered.popleft() if self._ordered else None

    def complete(
        self,
        conversations: Sequence[Sequence[Message]],
        params: SamplingParams,
        on_tokens: Optional[TokenCallback] = None,
    ) -> list[Completion]:
        with self._lock:
            self.requests.append([list(c) for c in conversations])
            call = self._calls
            self._calls += 1
        results = []
        for index, conversation in enumerate(conversations):
            last_user = next((m.content for m in reversed(conversation) if m.role == "user"), "")
            turn = attempts_in_prompt(last_user) if last_user else call
            item = self._next(index, turn)
            results.append(self._completion(item, index, turn, on_tokens))
        return results

    @staticmethod
    def _completion(
        item: dict[str, Any] | None, index: int, turn: int, on_tokens: Optional[TokenCallback]
    ) -> Completion:
        if item is None:
            return Completion(
                text="", finish_reason="error",
                error=f"the script has no response left for trajectory {index}, turn {turn}",
            )
        if item.get("delay_s"):
            time.sleep(float(item["delay_s"]))
        text, reasoning = item.get("text", ""), item.get("reasoning", "")
        tokens = item.get("tokens")
        if tokens is None:
            tokens = len(text.split()) + len(reasoning.split())
        if on_tokens is not None:
            on_tokens(index, tokens)
        if item.get("error"):
            return Completion(text="", finish_reason="error", error=str(item["error"]))
        return Completion(
            text=text, reasoning=reasoning, finish_reason=item.get("finish_reason", "stop"),
            tokens=tokens,
        )
