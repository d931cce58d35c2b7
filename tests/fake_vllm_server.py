"""A real HTTP server that behaves like vLLM's OpenAI-compatible server, serving scripted answers.

Use ``start_fake_server(responses) -> FakeServer`` (``.url`` ends in ``/v1``; ``.requests`` holds
the JSON bodies received; ``.stop()``), or the ``fake_server`` pytest fixture (a starter function;
servers stop at teardown): ``from fake_vllm_server import fake_server`` in a test module.

A response is a dict:
- ``{"text": ..., "reasoning": ...}`` an answer (reasoning goes to ``reasoning_content``);
  optional ``"finish_reason"`` (default "stop"), ``"delay_s"`` (sleep first);
- ``{"error": {"status": 429, "message": ..., "type": ...}}`` a vLLM-shaped error response,
  optional ``"retry_after"`` seconds (header);
- ``{"drop": True}`` close the connection without answering (a connection error);
- add ``"match": "substring"`` to answer any request whose last user message contains it
  (matched answers are reused); others are served once each, in order.
Token counts are whitespace-separated words. ``max_tokens`` truncates (reasoning first, then
content) with finish_reason "length"; ``stop`` cuts the content; ``n`` gives n choices.
Run as a script to serve a JSON file for manual tries: ``python tests/fake_vllm_server.py FILE``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_MODEL = "cognition-ai/Kevin-32B"
_WORD = re.compile(r"\s*\S+\s*|\s+")


def _words(text: str) -> list[str]:
    """Split text into whitespace tokens that join back into the text exactly."""
    return _WORD.findall(text) if text else []


def _count(text: str) -> int:
    return len(text.split())


class _Script:
    """Scripted responses: matched ones (reusable) and ordered ones (served once)."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.matched = [r for r in responses if "match" in r]
        self.ordered = deque(r for r in responses if "match" not in r)
        self.lock = threading.Lock()

    def next_for(self, last_user: str) -> dict[str, Any] | None:
        with self.lock:
            for response in self.matched:
                if response["match"] in last_user:
                    return response
            return self.ordered.popleft() if self.ordered else None


@dataclass
class _Choice:
    reasoning: list[str]
    content: list[str]
    finish_reason: str


def _shape_choice(response: dict[str, Any], max_tokens: int | None, stop: list[str]) -> _Choice:
    """Apply stop strings and max_tokens the way vLLM does (budget shared by reasoning + content)."""
    content_text = response.get("text", "")
    finish = response.get("finish_reason", "stop")
    cuts = [content_text.find(s) for s in stop if s and s in content_text]
    if cuts:
        content_text = content_text[: min(cuts)]
        finish = "stop"
    reasoning = _words(response.get("reasoning", ""))
    content = _words(content_text)
    if max_tokens is not None and len(reasoning) + len(content) > max_tokens:
        reasoning = reasoning[:max_tokens]
        content = content[: max(0, max_tokens - len(reasoning))]
        finish = "length"
    return _Choice(reasoning, content, finish)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "BadRequestError",
               headers: dict[str, str] | None = None) -> None:
        self._send_json(status, {"object": "error", "message": message, "type": kind,
                                 "param": None, "code": status}, headers)

    def _authorised(self) -> bool:
        key = self.server.fake.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "Unauthorized", "Unauthorized")
        return False

    def do_GET(self) -> None:
        if not self._authorised():
            return
        if self.path.rstrip("/") == "/v1/models":
            fake = self.server.fake
            self._send_json(200, {"object": "list", "data": [{
                "id": fake.model, "object": "model", "created": int(time.time()),
                "owned_by": "vllm", "root": fake.model, "max_model_len": fake.max_model_len,
            }]})
        else:
            self._error(404, f"Not Found: {self.path}", "NotFoundError")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self._authorised():
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"Not Found: {self.path}", "NotFoundError")
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as err:
            self._error(400, f"invalid JSON body: {err}")
            return
        fake = self.server.fake
        with fake.lock:
            fake.requests.append(body)
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._chat(body)
        finally:
            with fake.lock:
                fake.in_flight -= 1

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.server.fake
        if body.get("model") != fake.model:
            self._error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
            return
        messages = body.get("messages") or []
        last_user = next((m.get("content", "") for m in reversed(messages)
                          if m.get("role") == "user"), "")
        picks = [fake.script.next_for(str(last_user)) for _ in range(int(body.get("n") or 1))]
        chosen = [p for p in picks if p is not None]
        if len(chosen) < len(picks):
            self._error(400, "fake server: no scripted response left for this request")
            return
        first = chosen[0]
        if first.get("delay_s"):
            time.sleep(float(first["delay_s"]))
        if first.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if "error" in first:
            err = first["error"]
            headers = {"Retry-After": str(first["retry_after"])} if "retry_after" in first else None
            self._error(int(err.get("status", 500)), err.get("message", "error"),
                        err.get("type", "InternalServerError"), headers)
            return
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        choices = [_shape_choice(p, body.get("max_tokens"), stop) for p in chosen]
        prompt_tokens = sum(_count(str(m.get("content", ""))) for m in messages)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            include_usage = include_usage and fake.honour_include_usage
            self._stream(choices, prompt_tokens, include_usage)
        else:
            self._send_json(200, self._full(choices, prompt_tokens))

    def _usage(self, choices: list[_Choice], prompt_tokens: int) -> dict[str, int]:
        completion = sum(len(c.reasoning) + len(c.content) for c in choices)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion}

    def _full(self, choices: list[_Choice], prompt_tokens: int) -> dict[str, Any]:
        fake = self.server.fake
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": fake.model,
            "choices": [{
                "index": i, "logprobs": None, "finish_reason": c.finish_reason, "stop_reason": None,
                "message": {"role": "assistant", "content": "".join(c.content),
                            "reasoning_content": "".join(c.reasoning) or None, "tool_calls": []},
            } for i, c in enumerate(choices)],
            "usage": self._usage(choices, prompt_tokens),
        }

    def _events(self, choices: list[_Choice], prompt_tokens: int, include_usage: bool) -> Iterator[dict]:
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": self.server.fake.model}

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}]}

        for index, choice in enumerate(choices):
            yield chunk(index, {"role": "assistant", "content": ""})
            for word in choice.reasoning:
                yield chunk(index, {"reasoning_content": word})
            for word in choice.content:
                yield chunk(index, {"content": word})
            yield chunk(index, {}, choice.finish_reason)
        if include_usage:
            yield {**base, "choices": [], "usage": self._usage(choices, prompt_tokens)}

    def _stream(self, choices: list[_Choice], prompt_tokens: int, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        delay = self.server.fake.chunk_delay_s
        for event in self._events(choices, prompt_tokens, include_usage):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
            if delay:
                time.sleep(delay)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # dropped connections are scripted; keep test output clean


@dataclass
class FakeServer:
    """A running fake vLLM server on 127.0.0.1 (an ephemeral port)."""

    responses: list[dict[str, Any]]
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    max_model_len: int = 32768
    chunk_delay_s: float = 0.0  # sleep between streamed chunks (progress tests)
    honour_include_usage: bool = True  # False: act like servers that never send a usage chunk
    requests: list[dict[str, Any]] = field(default_factory=list)
    max_in_flight: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.script = _Script(self.responses)
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="fake-vllm-server")
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_fake_server(responses: list[dict[str, Any]], **options: Any) -> FakeServer:
    """Start a fake vLLM server serving ``responses``; options: model, api_key, max_model_len,
    chunk_delay_s, honour_include_usage."""
    return FakeServer(list(responses), **options)


@pytest.fixture
def fake_server() -> Iterator[Any]:
    """A function ``start(responses, **options) -> FakeServer``; every server stops at teardown."""
    servers: list[FakeServer] = []

    def start(responses: list[dict[str, Any]], **options: Any) -> FakeServer:
        server = start_fake_server(responses, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def main(argv: list[str]) -> int:
    """Serve a JSON file of responses (``{"responses": [...]}``) until interrupted."""
    with open(argv[0], encoding="utf-8") as handle:
        responses = json.load(handle)["responses"]
    server = start_fake_server(responses)
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
