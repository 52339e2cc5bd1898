"""Anthropic's Messages API through the ``anthropic`` SDK, imported only when used.

The SDK is an optional extra (``pip install 'maxcode[anthropic]'``). The Messages API returns
one answer per request, so n completions are n parallel requests. Answers are streamed: a long
answer arrives in full, and the request's timeout is the longest silence between two events
(the API sends pings while the model thinks).

Extended thinking: the request's ``reasoning_effort`` gives a thinking budget per level
(``REASONING_ROOM``), or the ``thinking_budget`` option gives one in tokens (at least 1024; it
wins); ``max_tokens`` is then the answer's limit plus the budget. Thinking blocks are not part
of the text, but their tokens are billed as output and counted as such.

Prompt caching: a turn's ``cache_prefix`` becomes a text block marked ``cache_control``; the
usage's cache reads and writes are counted in the prompt tokens and priced as such.
"""

from __future__ import annotations

import importlib
import inspect
import os
from types import ModuleType
from typing import Any

from maxcode.llm._errors import LLMConfigError, LLMError, ProviderNotInstalled, TransientError
from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings
from maxcode.llm._records import REASONING_ROOM, LLMRequest, Message
from maxcode.llm._sdk_errors import translate

_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}


def import_anthropic() -> ModuleType:
    """The ``anthropic`` SDK, or a clear error saying how to install it."""
    try:
        return importlib.import_module("anthropic")
    except ImportError:
        raise ProviderNotInstalled(
            "the anthropic provider needs the anthropic SDK: pip install 'maxcode[anthropic]'"
        ) from None


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_CACHE_MARK = {"type": "ephemeral"}


def _blocks(message: Message) -> list[dict[str, Any]]:
    """A turn as text blocks: its stable start marked for the prompt cache, then the rest."""
    cut = min(message.cache_prefix, len(message.content))
    if cut == 0:
        return [{"type": "text", "text": message.content}]
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": message.content[:cut], "cache_control": dict(_CACHE_MARK)}
    ]
    if message.content[cut:]:
        blocks.append({"type": "text", "text": message.content[cut:]})
    return blocks


def _content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Plain text when nothing is marked for the cache (as the API's simplest form), else the
    blocks."""
    if any("cache_control" in block for block in blocks):
        return blocks
    return "\n\n".join(block["text"] for block in blocks)


def _usage_counts(usage: object, counts: dict[str, int | None]) -> None:
    """Update ``counts`` from a usage record (a stream reports input at its start and the
    output, cumulative, at its end): the prompt tokens are all input, cache reads and writes
    included."""
    read = _as_int(getattr(usage, "cache_read_input_tokens", None))
    written = _as_int(getattr(usage, "cache_creation_input_tokens", None))
    plain = _as_int(getattr(usage, "input_tokens", None))
    if plain is not None:
        counts["prompt_tokens"] = plain + (read or 0) + (written or 0)
        counts["cached_prompt_tokens"] = read or 0
        counts["cache_write_tokens"] = written or 0
    output = _as_int(getattr(usage, "output_tokens", None))
    if output is not None:
        counts["completion_tokens"] = output


class AnthropicProvider(LLMProvider):
    """Claude models through ``AsyncAnthropic``."""

    provider_name = "anthropic"
    supports_n = False
    times_itself = True

    def __init__(
        self,
        model: str,
        settings: ProviderSettings | None = None,
        *,
        provider_name: str | None = None,
    ) -> None:
        super().__init__(model, settings, provider_name=provider_name)
        self._sdk = import_anthropic()
        base_url = self.settings.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self._base_url = base_url.rstrip("/") if base_url else None
        key = (
            self.settings.api_key
            or os.environ.get("MAXCODE_API_KEY")
            or os.environ.get("ANTHROPIC_API_KEY")
        )
        if not key:
            if self._base_url is None:
                raise LLMConfigError(
                    f"{self.spec}: no API key; set ANTHROPIC_API_KEY (or MAXCODE_API_KEY)"
                )
            key = "not-needed"
        self._api_key = key
        self._client: Any = None
        self._signature_cache: dict[str, bool] = {}

    @property
    def base_url(self) -> str | None:
        """The endpoint; None for api.anthropic.com (the SDK's default)."""
        return self._base_url

    @property
    def endpoint(self) -> str:
        """The endpoint's URL, for messages and the concurrency limit."""
        return self._base_url or "https://api.anthropic.com"

    async def setup(self) -> None:
        """Create the SDK client, with the SDK's own retries off."""
        if self._client is None:
            self._client = self._sdk.AsyncAnthropic(
                api_key=self._api_key, base_url=self._base_url, max_retries=0
            )
        await super().setup()

    async def close(self) -> None:
        """Close the SDK client's connections."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        await super().close()

    def _accepts(self, parameter: str) -> bool:
        """Whether the installed SDK's ``messages.create`` takes ``parameter``.

        Recent SDKs dropped sampling parameters (``temperature``) that the newest models no
        longer accept; we follow the SDK rather than send what the API would reject. A value
        can still be forced through ``options``, which go into the request body as they are.
        """
        if parameter not in self._signature_cache:
            try:
                create = self._sdk.resources.messages.AsyncMessages.create
                accepted = parameter in inspect.signature(create).parameters
            except (AttributeError, TypeError, ValueError):
                accepted = True
            self._signature_cache[parameter] = accepted
        return self._signature_cache[parameter]

    def _thinking_budget(self, request: LLMRequest) -> int | None:
        budget = request.options.get("thinking_budget")
        if budget is None:
            if request.reasoning_effort is not None:
                return REASONING_ROOM[request.reasoning_effort]
            return None
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
            raise LLMConfigError(
                f"{self.spec}: thinking_budget must be a whole number of tokens >= 1024, "
                f"not {budget!r}"
            )
        return budget

    def _output_limit(self, request: LLMRequest) -> int:
        # max_tokens covers thinking and answer together; the request's limit is the answer's.
        answer = request.max_tokens or self.default_max_tokens
        return answer + (self._thinking_budget(request) or 0)

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        system: list[dict[str, Any]] = []
        turns: list[tuple[str, list[dict[str, Any]]]] = []
        for message in request.messages:
            if message.role == "system":
                system += _blocks(message)
            elif turns and turns[-1][0] == message.role:
                turns[-1][1].extend(_blocks(message))  # the API wants alternation
            else:
                turns.append((message.role, _blocks(message)))
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": role, "content": _content(blocks)} for role, blocks in turns],
            "max_tokens": self._output_limit(request),
        }
        if system:
            params["system"] = _content(system)
        thinking = self._thinking_budget(request)
        if thinking is not None:
            # With thinking on, the API accepts no temperature but its default.
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif self._accepts("temperature"):
            params["temperature"] = min(request.temperature, 1.0)
        if request.stop:
            params["stop_sequences"] = list(request.stop)
        extra = {key: value for key, value in request.options.items() if key != "thinking_budget"}
        if extra:
            params["extra_body"] = extra
        return params

    async def _complete_once(self, request: LLMRequest, n: int) -> ProviderReply:
        if self._client is None:
            await self.setup()
        # The read timeout is the longest silence between two events of the stream.
        timeout = self._sdk.Timeout(request.timeout, connect=min(10.0, request.timeout))
        params = self._params(request)
        try:
            stream = await self._client.messages.create(**params, stream=True, timeout=timeout)
            return await self._read_stream(stream)
        except (TransientError, LLMError):
            raise  # ours already, from reading the stream
        except Exception as exc:
            mapped = translate(
                exc,
                self._sdk,
                spec=self.spec,
                endpoint=self.endpoint,
                key_hint="ANTHROPIC_API_KEY or MAXCODE_API_KEY",
            )
            if mapped is None:
                # Not an API error: an SDK this code does not know (a changed signature, a
                # new exception). Still one clear line for the user; the cause stays chained.
                raise LLMError(
                    f"{self.spec}: unexpected error in the anthropic SDK: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            raise mapped from None

    async def _read_stream(self, stream: Any) -> ProviderReply:
        """Gather a streamed message: the text of its text blocks (thinking left out), its
        stop reason, its usage and the model's name."""
        text: list[str] = []
        counts: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": None}
        stop_reason: object = None
        model: object = None
        started = False
        try:
            async for event in stream:
                kind = getattr(event, "type", None)
                if kind == "message_start":
                    started = True
                    message = getattr(event, "message", None)
                    model = getattr(message, "model", None)
                    _usage_counts(getattr(message, "usage", None), counts)
                elif kind == "content_block_start":
                    block = getattr(event, "content_block", None)
                    first = getattr(block, "text", None)
                    if getattr(block, "type", None) == "text" and isinstance(first, str):
                        text.append(first)
                elif kind == "content_block_delta":
                    delta = getattr(event, "delta", None)
                    piece = getattr(delta, "text", None)
                    if getattr(delta, "type", None) == "text_delta" and isinstance(piece, str):
                        text.append(piece)
                elif kind == "message_delta":
                    stop_reason = getattr(getattr(event, "delta", None), "stop_reason", None)
                    _usage_counts(getattr(event, "usage", None), counts)
        finally:
            await stream.close()
        if not started:
            raise TransientError("malformed_response", "the reply has no message")
        return ProviderReply(
            texts=["".join(text)],
            finish_reasons=[
                _STOP_REASONS.get(stop_reason, stop_reason)
                if isinstance(stop_reason, str)
                else None
            ],
            model=model if isinstance(model, str) and model else None,
            **counts,
        )
