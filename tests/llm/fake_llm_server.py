"""A fake LLM server on loopback that speaks the OpenAI and the Anthropic wire formats.

It drives the real SDK clients through the real provider code. Each request takes the next
scripted ``Step`` (or the default step when the script is empty) and the server records what
it saw, so tests can assert on request bodies.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """How the server answers one request."""

    status: int = 200
    texts: list[str] = field(default_factory=lambda: ["ok"])
    prompt_tokens: int = 10
    completion_tokens: int = 5
    delay_s: float = 0.0
    ignore_n: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    usage: bool = True
    together: int = 0
    """Hold the reply until this many requests are in flight at once (at most ``TOGETHER_S``):
    what a client that sends them side by side sees answered, one that sends them one by one
    waits out."""


TOGETHER_S = 10.0


@dataclass
class Seen:
    """A request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeLLMServer:
    """An OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1 with scripted replies."""

    def __init__(self) -> None:
        self.steps: deque[Step] = deque()
        self.default = Step()
        self.seen: list[Seen] = []
        self.responder: Callable[[dict[str, Any]], Step] | None = None
        """When set, answers every request from its body (instead of the script)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._flight = threading.Condition(self._lock)
        self.in_flight = 0
        self.most_in_flight = 0
        """The most requests the server held at once."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                with server._lock:
                    server.seen.append(Seen(self.path, dict(self.headers), body))
                    if server.responder is not None:
                        step = server.responder(body)
                    elif server.steps:
                        step = server.steps.popleft()
                    else:
                        step = server.default
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    server._flight.notify_all()
                    if step.together:
                        server._flight.wait_for(
                            lambda: server.in_flight >= step.together, timeout=TOGETHER_S
                        )
                try:
                    self._answer(step, body)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, step: Step, body: dict[str, Any]) -> None:
                if step.delay_s and server._stopping.wait(step.delay_s):
                    return
                anthropic = self.path.rstrip("/").endswith("/messages")
                if step.raw_body is not None:
                    payload = step.raw_body
                elif step.status != 200:
                    payload = json.dumps(server._error(step.status, anthropic)).encode()
                elif anthropic:
                    payload = json.dumps(server._anthropic_reply(step, body)).encode()
                else:
                    payload = json.dumps(server._openai_reply(step, body)).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in step.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The base URL an OpenAI client needs (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        """The base URL an Anthropic client needs (it appends ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *steps: Step) -> None:
        """Queue steps, answered in order before the default step."""
        with self._lock:
            self.steps.extend(steps)

    def count(self, path_suffix: str = "") -> int:
        """Requests received (whose path ends with ``path_suffix``)."""
        with self._lock:
            return sum(1 for seen in self.seen if seen.path.endswith(path_suffix))

    def close(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def _error(status: int, anthropic: bool) -> dict[str, Any]:
        messages = {
            401: "Incorrect API key provided",
            403: "Forbidden",
            404: "The model `nope` does not exist",
            429: "Rate limit reached",
            500: "Internal server error",
            529: "Overloaded",
        }
        message = messages.get(status, f"error {status}")
        if anthropic:
            return {"type": "error", "error": {"type": "api_error", "message": message}}
        return {"error": {"message": message, "type": "error", "code": str(status)}}

    @staticmethod
    def _openai_reply(step: Step, body: dict[str, Any]) -> dict[str, Any]:
        wanted = int(body.get("n") or 1)
        count = 1 if step.ignore_n else wanted
        reply: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": index,
                    "message": {
                        "role": "assistant",
                        "content": step.texts[index % len(step.texts)],
                    },
                    "finish_reason": "stop",
                }
                for index in range(count)
            ],
        }
        if step.usage:
            reply["usage"] = {
                "prompt_tokens": step.prompt_tokens,
                "completion_tokens": step.completion_tokens * count,
                "total_tokens": step.prompt_tokens + step.completion_tokens * count,
            }
        return reply

    @staticmethod
    def _anthropic_reply(step: Step, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if "thinking" in body:
            content.append({"type": "thinking", "thinking": "hmm", "signature": "sig"})
        content.append({"type": "text", "text": step.texts[0]})
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": step.prompt_tokens,
                "output_tokens": step.completion_tokens,
            },
        }


@contextmanager
def serving(responder: Callable[[dict[str, Any]], Step] | None = None) -> Iterator[FakeLLMServer]:
    """A server answering every request with ``responder`` (None: the script), closed after."""
    fake = FakeLLMServer()
    fake.responder = responder
    try:
        yield fake
    finally:
        fake.close()


def is_critic(body: dict[str, Any]) -> bool:
    """The request is the critic's (its system prompt), not the policy's."""
    return any("You review one attempt" in str(m.get("content", "")) for m in body["messages"])
