"""A fake LLM server on loopback that speaks the OpenAI and the Anthropic wire formats.

It drives the real SDK clients through the real provider code. Each request takes the next
scripted ``Step`` (or the default step when the script is empty) and the server records what
it saw, so tests can assert on request bodies. A request with ``"stream": true`` is answered
as server-sent events (chunked), as the real APIs do; Anthropic's prompt cache is emulated: a
prefix marked ``cache_control`` is written on first sight and read after.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
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
    finish_reason: str = "stop"
    """Why the answer stopped (OpenAI's words; ``length`` is Anthropic's ``max_tokens``)."""
    keepalive_s: float = 0.0
    """A streamed reply: send its headers at once, then an SSE comment this often until
    ``delay_s`` has passed (0: silence until then)."""
    cached_tokens: int = 0
    """OpenAI: ``prompt_tokens_details.cached_tokens`` (of ``prompt_tokens``)."""
    reasoning_tokens: int = 0
    """OpenAI: ``completion_tokens_details.reasoning_tokens`` (of the completion tokens)."""
    no_stream: bool = False
    """Reject a streamed request with HTTP 400, as a server that cannot stream does."""


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
        self._arrivals = 0
        self._released = 0
        self.most_in_flight = 0
        """The most requests the server held at once."""
        self.prompt_cache: set[str] = set()
        """Digests of the prefixes marked for Anthropic's cache so far."""
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
                    server._arrivals += 1
                    ticket = server._arrivals
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    if step.together and server.in_flight >= step.together:
                        # Every request held so far goes, even if one of them is answered
                        # before the others wake up.
                        server._released = server._arrivals
                    server._flight.notify_all()
                    if step.together:
                        server._flight.wait_for(
                            lambda: server._released >= ticket, timeout=TOGETHER_S
                        )
                try:
                    self._answer(step, body)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, step: Step, body: dict[str, Any]) -> None:
                anthropic = self.path.rstrip("/").endswith("/messages")
                streamed = bool(body.get("stream"))
                if streamed and step.no_stream:
                    step = Step(status=400)
                if streamed and step.raw_body is None and step.status == 200:
                    self._stream(step, body, anthropic)
                    return
                if step.delay_s and server._stopping.wait(step.delay_s):
                    return
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

            def _stream(self, step: Step, body: dict[str, Any], anthropic: bool) -> None:
                """Answer as server-sent events, chunked; keep-alive comments while waiting."""
                try:
                    if step.keepalive_s and step.delay_s:
                        self._stream_headers()
                        until = time.monotonic() + step.delay_s
                        while time.monotonic() < until:
                            self._chunk(b": keep-alive\n\n")
                            if server._stopping.wait(
                                min(step.keepalive_s, until - time.monotonic())
                            ):
                                return
                    else:
                        if step.delay_s and server._stopping.wait(step.delay_s):
                            return
                        self._stream_headers()
                    if anthropic:
                        events = server._anthropic_events(server._anthropic_reply(step, body))
                    else:
                        events = server._openai_events(server._openai_reply(step, body), body)
                    for event in events:
                        self._chunk(event)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass  # the client gave up (a timeout test)

            def _stream_headers(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self.wfile.flush()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

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
    def _openai_events(reply: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        """A chat completion as the chunks of a stream: each choice's text in two pieces, its
        finish reason, then the usage alone when the request asked for it."""
        head = {key: reply[key] for key in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"
        chunks: list[dict[str, Any]] = []
        for choice in reply["choices"]:
            text = choice["message"]["content"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"role": "assistant", "content": piece}
                chunks.append({"index": choice["index"], "delta": delta, "finish_reason": None})
            chunks.append(
                {"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}
            )
        events = [{**head, "choices": [chunk]} for chunk in chunks]
        if "usage" in reply and (body.get("stream_options") or {}).get("include_usage"):
            events.append({**head, "choices": [], "usage": reply["usage"]})
        return [f"data: {json.dumps(event)}\n\n".encode() for event in events] + [
            b"data: [DONE]\n\n"
        ]

    @staticmethod
    def _anthropic_events(reply: dict[str, Any]) -> list[bytes]:
        """A message as the events of a stream: its start (input usage), each block (a ping
        between), its stop reason with the output usage, its end."""
        usage = reply["usage"]
        start = {
            **reply,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(reply["content"]):
            if block["type"] == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
                delta = {"type": "thinking_delta", "thinking": block["thinking"]}
            else:
                empty = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": empty}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
        stop = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
        events += [
            ("message_delta", {"type": "message_delta", "delta": stop,
                               "usage": {"output_tokens": usage["output_tokens"]}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]

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
                    "finish_reason": step.finish_reason,
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
            if step.cached_tokens:
                reply["usage"]["prompt_tokens_details"] = {"cached_tokens": step.cached_tokens}
            if step.reasoning_tokens:
                reply["usage"]["completion_tokens_details"] = {
                    "reasoning_tokens": step.reasoning_tokens * count
                }
        return reply

    def _anthropic_reply(self, step: Step, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if "thinking" in body:
            content.append({"type": "thinking", "thinking": "hmm", "signature": "sig"})
        content.append({"type": "text", "text": step.texts[0]})
        # Input at about 4 characters a token (at least the step's prompt tokens); the part
        # up to the last block marked for the cache is written to it, or read from it.
        text, marked = prompt_text(body)
        total = max(step.prompt_tokens, len(text) // 4)
        usage = {"input_tokens": total, "output_tokens": step.completion_tokens}
        if marked:
            digest = hashlib.sha256(marked.encode()).hexdigest()
            with self._lock:
                seen = digest in self.prompt_cache
                self.prompt_cache.add(digest)
            prefix = min(len(marked) // 4, total)
            usage["input_tokens"] = total - prefix
            usage["cache_read_input_tokens" if seen else "cache_creation_input_tokens"] = prefix
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": content,
            "stop_reason": "max_tokens" if step.finish_reason == "length" else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }


def prompt_text(body: dict[str, Any]) -> tuple[str, str]:
    """The text of an Anthropic request (system, then the turns), and its part up to the last
    block marked ``cache_control`` (empty when nothing is marked)."""
    blocks: list[Any] = []
    for part in [body.get("system") or ""] + [turn["content"] for turn in body["messages"]]:
        blocks += part if isinstance(part, list) else [{"type": "text", "text": part}]
    text, marked = "", ""
    for block in blocks:
        text += block.get("text", "")
        if "cache_control" in block:
            marked = text
    return text, marked


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
    """The request is the critic's (its system prompt, in the turns or, for Anthropic, apart),
    not the policy's."""
    texts = [str(body.get("system", ""))] + [str(m.get("content", "")) for m in body["messages"]]
    return any("You review one attempt" in text for text in texts)
