"""Backends: the openai backend over real HTTP against a vLLM-like server; vllm and scripted."""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kevin_agent.backends import make_backend
from kevin_agent.backends.base import Message, SamplingParams
from kevin_agent.backends.openai_backend import OpenAIBackend
from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.backends.vllm_backend import (
    NOT_INSTALLED,
    chat_conversations,
    completion_from_output,
    llm_kwargs,
    sampling_kwargs,
)
from kevin_agent.config import BackendSettings
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.parsing import parse_completion

CODE = "class ModelNew(nn.Module):\n    pass\n"
ANSWER = f"Here it is.\n\n```python\n{CODE}```\n\nOne fused kernel."
REASONING = "Let me think about coalesced loads and the block size first"
USER = [Message("user", "optimise this please")]


def backend_for(server, **overrides) -> OpenAIBackend:
    settings = BackendSettings(base_url=server.url, **overrides)
    return OpenAIBackend(settings, backoff_base_s=0.01)


def test_streaming_reasoning_content_and_token_callbacks(fake_server) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    server = fake_server([{"text": ANSWER, "reasoning": f"{REASONING} {words}"}])
    seen: list[tuple[int, int]] = []
    [completion] = backend_for(server).complete([USER], SamplingParams(), lambda i, t: seen.append((i, t)))
    assert completion.error is None and completion.finish_reason == "stop"
    assert completion.reasoning == f"{REASONING} {words}"
    assert completion.text == ANSWER
    expected_tokens = len(completion.reasoning.split()) + len(ANSWER.split())
    assert completion.tokens == expected_tokens  # from the final usage chunk
    counts = [t for _, t in seen]
    assert len(seen) >= 3 and counts == sorted(counts) and counts[-1] == expected_tokens
    body = server.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "cognition-ai/Kevin-32B" and body["temperature"] == 0.9
    assert body["messages"] == [{"role": "user", "content": "optimise this please"}]
    candidate = parse_completion(completion, 0, 0)
    assert candidate.code == CODE and candidate.summary == "One fused kernel."


def test_stream_without_usage_counts_chunks(fake_server) -> None:
    server = fake_server([{"text": "a b c d e", "reasoning": "x y z"}], honour_include_usage=False)
    [completion] = backend_for(server).complete([USER], SamplingParams())
    assert completion.tokens == 8


def test_non_streaming_reads_reasoning_content_and_usage(fake_server) -> None:
    server = fake_server([{"text": ANSWER, "reasoning": REASONING}])
    seen: list[tuple[int, int]] = []
    [completion] = backend_for(server, stream=False).complete([USER], SamplingParams(),
                                                              lambda i, t: seen.append((i, t)))
    assert completion.reasoning == REASONING and completion.text == ANSWER
    assert completion.tokens == len(REASONING.split()) + len(ANSWER.split())
    assert seen == [(0, completion.tokens)]
    assert "stream" not in server.requests[0] or server.requests[0]["stream"] is False


def test_truncation_gives_length(fake_server) -> None:
    server = fake_server([{"text": ANSWER, "reasoning": REASONING}])
    [completion] = backend_for(server).complete([USER], SamplingParams(max_tokens=15))
    assert completion.finish_reason == "length" and completion.tokens == 15
    assert completion.reasoning == REASONING  # 11 words, then 4 words of the answer
    assert completion.text == "Here it is.\n\n```python\n"
    assert server.requests[0]["max_tokens"] == 15
    candidate = parse_completion(completion, 0, 0)
    assert candidate.code is None and "middle of a code block" in (candidate.parse_error or "")


def test_stop_strings_are_sent_and_applied(fake_server) -> None:
    server = fake_server([{"text": "keep this STOP drop that"}])
    [completion] = backend_for(server).complete([USER], SamplingParams(stop=("STOP",)))
    assert completion.text == "keep this " and server.requests[0]["stop"] == ["STOP"]


def test_429_then_success_is_retried(fake_server) -> None:
    server = fake_server([
        {"error": {"status": 429, "message": "Too many requests", "type": "RateLimitError"}},
        {"error": {"status": 503, "message": "warming up", "type": "ServiceUnavailableError"}},
        {"text": ANSWER},
    ])
    [completion] = backend_for(server).complete([USER], SamplingParams())
    assert completion.error is None and completion.text == ANSWER
    assert len(server.requests) == 3


def test_persistent_500_becomes_one_line_error(fake_server) -> None:
    boom = {"error": {"status": 500, "message": "CUDA out of memory\nin the engine", "type": "InternalServerError"}}
    server = fake_server([boom] * 3)
    [completion] = backend_for(server, max_retries=2).complete([USER], SamplingParams())
    assert completion.text == "" and completion.finish_reason == "error"
    assert "HTTP 500" in (completion.error or "") and "CUDA out of memory in the engine" in (completion.error or "")
    assert "after 3 attempts" in (completion.error or "") and "\n" not in (completion.error or "")
    assert len(server.requests) == 3


def test_400_is_not_retried(fake_server) -> None:
    server = fake_server([
        {"error": {"status": 400, "message": "This model's maximum context length is 32768 tokens",
                   "type": "BadRequestError"}},
        {"text": "never served"},
    ])
    [completion] = backend_for(server).complete([USER], SamplingParams())
    assert "HTTP 400" in (completion.error or "") and "maximum context length" in (completion.error or "")
    assert len(server.requests) == 1


def test_unknown_model_and_bad_key_are_reported(fake_server) -> None:
    server = fake_server([{"text": "x"}], api_key="secret")
    [bad_key] = backend_for(server, api_key="wrong").complete([USER], SamplingParams())
    assert "HTTP 401" in (bad_key.error or "")
    [ok] = backend_for(server, api_key="secret").complete([USER], SamplingParams())
    assert ok.text == "x"
    [bad_model] = backend_for(server, api_key="secret", model="other/model").complete([USER], SamplingParams())
    assert "HTTP 404" in (bad_model.error or "") and "other/model" in (bad_model.error or "")


def test_dropped_connection_is_retried(fake_server) -> None:
    server = fake_server([{"drop": True}, {"text": ANSWER}])
    [completion] = backend_for(server).complete([USER], SamplingParams())
    assert completion.text == ANSWER and len(server.requests) == 2


def test_unreachable_server_is_an_error_not_an_exception() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once we leave: nothing listens there
    settings = BackendSettings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    [completion] = OpenAIBackend(settings, backoff_base_s=0.01).complete([USER], SamplingParams())
    assert (completion.error or "").startswith(f"cannot reach http://127.0.0.1:{port}/v1")


def test_timeout_is_reported(fake_server) -> None:
    server = fake_server([{"text": "slow", "delay_s": 2.0}])
    [completion] = backend_for(server, timeout_s=0.3, max_retries=0).complete([USER], SamplingParams())
    assert "timed out" in (completion.error or "")


def test_batch_keeps_order_and_one_failure_does_not_lose_the_batch(fake_server) -> None:
    server = fake_server([
        {"match": "task-0", "text": "answer zero"},
        {"match": "task-1", "error": {"status": 400, "message": "bad prompt"}},
        {"match": "task-2", "text": "answer two", "delay_s": 0.2},
    ])
    conversations = [[Message("user", f"task-{i}")] for i in range(3)]
    results = backend_for(server).complete(conversations, SamplingParams())
    assert [r.text for r in results] == ["answer zero", "", "answer two"]
    assert results[1].error and results[0].error is None and results[2].error is None


@pytest.mark.parametrize("concurrency, expected_max", [(2, 2), (6, 6)])
def test_concurrency_bound_is_observed(fake_server, concurrency: int, expected_max: int) -> None:
    server = fake_server([{"match": "go", "text": "done", "delay_s": 0.4}])
    conversations = [[Message("user", f"go {i}")] for i in range(6)]
    started = time.monotonic()
    results = backend_for(server, concurrency=concurrency).complete(conversations, SamplingParams())
    assert [r.text for r in results] == ["done"] * 6
    assert server.max_in_flight == expected_max
    assert time.monotonic() - started >= 0.4 * (6 // expected_max) - 0.05


def test_cancel_stops_streams_in_flight(fake_server) -> None:
    server = fake_server([{"text": " ".join(["tok"] * 400)}], chunk_delay_s=0.01)
    backend = backend_for(server)
    threading.Timer(0.3, backend.cancel).start()
    started = time.monotonic()
    [completion] = backend.complete([USER], SamplingParams())
    assert completion.error == "cancelled" and time.monotonic() - started < 3.0


def test_info_reads_max_model_len(fake_server) -> None:
    server = fake_server([], max_model_len=131072)
    assert backend_for(server).info().context_tokens == 131072


def test_make_backend_openai_and_unknown() -> None:
    backend = make_backend(BackendSettings(base_url="http://127.0.0.1:9/v1"))
    assert backend.name == "openai" and isinstance(backend, OpenAIBackend)
    with pytest.raises(UserInputError, match="unknown backend"):
        make_backend(BackendSettings(backend="tgi"))


# --- vllm ---------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_missing_is_one_clear_line() -> None:
    with pytest.raises(EnvironmentProblem) as err:
        make_backend(BackendSettings(backend="vllm"))
    assert str(err.value) == NOT_INSTALLED
    assert "pip install 'kevin-agent[vllm]'" in NOT_INSTALLED and "--backend openai --base-url" in NOT_INSTALLED


def test_vllm_argument_shapes() -> None:
    settings = BackendSettings(backend="vllm", tensor_parallel_size=2, max_model_len=65536)
    assert llm_kwargs(settings) == {"model": "cognition-ai/Kevin-32B", "dtype": "bfloat16",
                                    "tensor_parallel_size": 2, "max_model_len": 65536}
    assert "max_model_len" not in llm_kwargs(BackendSettings(backend="vllm"))
    params = SamplingParams(temperature=0.6, top_p=0.95, max_tokens=20000, stop=("</answer>",))
    assert sampling_kwargs(params) == {"n": 1, "temperature": 0.6, "top_p": 0.95,
                                       "max_tokens": 20000, "stop": ["</answer>"]}
    convs = [[Message("system", "s"), Message("user", "u")], [Message("user", "v")]]
    assert chat_conversations(convs) == [
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        [{"role": "user", "content": "v"}],
    ]


@dataclass
class _CompletionOutput:  # the fields of vllm.outputs.CompletionOutput that we read
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class _RequestOutput:
    outputs: list[_CompletionOutput]


def test_vllm_output_conversion() -> None:
    out = completion_from_output(_RequestOutput([_CompletionOutput("thinking</think>answer", [1, 2, 3], "length")]))
    assert (out.text, out.tokens, out.finish_reason, out.error) == ("thinking</think>answer", 3, "length", None)
    assert completion_from_output(_RequestOutput([])).error


# --- scripted -----------------------------------------------------------------------------------


def _write(tmp_path: Path, payload: object) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(payload) if not isinstance(payload, str) else payload)
    return path


def test_scripted_in_order_keyed_and_exhausted(tmp_path: Path) -> None:
    from kevin_agent.data import Candidate, Stage, Task, Verdict
    from kevin_agent.prompts import build_messages
    from kevin_agent.tokens import estimate_tokens

    path = _write(tmp_path, {"responses": [
        {"text": "first in order", "reasoning": "r r"},
        {"trajectory": 1, "turn": 1, "text": "keyed t1 turn1", "finish_reason": "length", "tokens": 99},
        {"text": "second in order"},
    ]})
    backend = make_backend(BackendSettings(backend="scripted", script=str(path)))
    task = Task(source="class Model: pass\n", class_name="Model")
    turn0 = build_messages(task, [], "GPU", 10**6, estimate_tokens)
    seen: list[tuple[int, int]] = []
    first = backend.complete([turn0, turn0], SamplingParams(), lambda i, t: seen.append((i, t)))
    assert [c.text for c in first] == ["first in order", "second in order"]
    assert first[0].reasoning == "r r" and seen == [(0, 5), (1, 3)]
    past = [(Candidate(0, 0, code="x", summary="s"), Verdict(Stage.COMPILE, False, "failed"))]
    turn1 = build_messages(task, past, "GPU", 10**6, estimate_tokens)
    second = backend.complete([turn1, turn1], SamplingParams())
    assert second[1].text == "keyed t1 turn1" and second[1].finish_reason == "length"
    assert second[1].tokens == 99
    assert second[0].error and "trajectory 0, turn 1" in second[0].error
    assert isinstance(backend, ScriptedBackend)
    assert len(backend.requests) == 2 and backend.requests[1][0] == turn1


@pytest.mark.parametrize("content, fragment", [
    (None, "script file not found"),
    ("{nope", "not valid JSON"),
    ({"answers": []}, '"responses"'),
    ({"responses": [{"trajectory": 0, "text": "x"}]}, "both trajectory and turn"),
    ({"responses": [{"text": "x", "colour": "red"}]}, "unknown field 'colour'"),
    ({"responses": [{"reasoning": "only"}]}, "needs a 'text'"),
])
def test_scripted_bad_files_are_one_line_errors(tmp_path: Path, content, fragment: str) -> None:
    path = tmp_path / "missing.json" if content is None else _write(tmp_path, content)
    with pytest.raises(UserInputError) as err:
        make_backend(BackendSettings(backend="scripted", script=str(path)))
    assert fragment in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_scripted_error_entry_and_list_input() -> None:
    backend = ScriptedBackend([{"error": "HTTP 500: boom"}, {"text": "ok"}])
    results = backend.complete([USER, USER], SamplingParams())
    assert results[0].error == "HTTP 500: boom" and results[1].text == "ok"
