"""OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp, SGLang, ...).

One class serves ``openai/``, ``ollama/`` and ``vllm/``: only the default endpoint and whether
a key is required differ. The key comes from the ``api_key`` argument, ``MAXCODE_API_KEY``,
or ``OPENAI_API_KEY`` (``openai`` only; a local server is never sent an OpenAI key unasked),
in that order; a placeholder is sent to servers that need none.

Answers are streamed (``stream_options.include_usage`` for the usage), so that a long answer
arrives in full and a dead connection is noticed by silence: the request's timeout is the
SDK's read timeout, the longest wait for the next piece. A server that rejects a streamed
request is asked again without streaming, and from then on never streamed to.

Reasoning models: ``reasoning_effort`` goes into the body as it is. Their output limit,
``max_completion_tokens``, covers reasoning and answer together, so it is the answer's limit
(``max_tokens``) plus the room of the effort level (``REASONING_ROOM``; ``medium``, the API's
default, when no effort is given).
"""

from __future__ import annotations

import os
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any

from maxcode.llm._errors import (
    LLMConfigError,
    LLMError,
    LLMRequestError,
    ProviderNotInstalled,
    TransientError,
)
from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings
from maxcode.llm._records import REASONING_ROOM, LLMRequest
from maxcode.llm._sdk_errors import translate

if TYPE_CHECKING:
    import openai

PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to servers that do not check one (the SDK insists on some key)."""

# OpenAI's reasoning models reject ``max_tokens`` and any temperature but the default.
_REASONING_MODEL = re.compile(r"^(?:o\d|gpt-5)")


def _import_openai() -> ModuleType:
    # Imported on first use: the SDK takes over half a second to import.
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a dependency of maxcode
        raise ProviderNotInstalled(
            "the openai provider needs the openai SDK: pip install openai"
        ) from None
    return openai


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage_counts(usage: object) -> dict[str, int | None]:
    """The counts of a usage record: prompt and completion tokens, and the cached and
    reasoning tokens among them where the server reports them."""
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return {
        "prompt_tokens": _as_int(getattr(usage, "prompt_tokens", None)),
        "completion_tokens": _as_int(getattr(usage, "completion_tokens", None)),
        "cached_prompt_tokens": _as_int(getattr(prompt_details, "cached_tokens", None)),
        "reasoning_tokens": _as_int(getattr(completion_details, "reasoning_tokens", None)),
    }


class OpenAIProvider(LLMProvider):
    """Chat completions through the official ``openai`` SDK (``AsyncOpenAI``)."""

    provider_name = "openai"
    times_itself = True

    def __init__(
        self,
        model: str,
        settings: ProviderSettings | None = None,
        *,
        provider_name: str | None = None,
        default_base_url: str | None = None,
    ) -> None:
        super().__init__(model, settings, provider_name=provider_name)
        is_openai = self.provider_name == "openai"
        base_url = self.settings.base_url
        if base_url is None and is_openai:
            base_url = os.environ.get("OPENAI_BASE_URL") or None
        self._base_url = (base_url or default_base_url or "").rstrip("/") or None
        key = self.settings.api_key or os.environ.get("MAXCODE_API_KEY")
        if not key and is_openai:
            key = os.environ.get("OPENAI_API_KEY")
        self.key_hint = "OPENAI_API_KEY or MAXCODE_API_KEY" if is_openai else "MAXCODE_API_KEY"
        if not key:
            if is_openai and self._base_url is None:
                raise LLMConfigError(
                    f"{self.spec}: no API key; set OPENAI_API_KEY (or MAXCODE_API_KEY), "
                    "or pass --base-url for a local OpenAI-compatible server"
                )
            key = PLACEHOLDER_KEY
        self._api_key = key
        self._client: openai.AsyncOpenAI | None = None
        self._streaming = True
        self._streamed = False

    @property
    def base_url(self) -> str | None:
        """The endpoint; None for api.openai.com (the SDK's default)."""
        return self._base_url

    @property
    def endpoint(self) -> str:
        """The endpoint's URL, for messages and the concurrency limit."""
        return self._base_url or "https://api.openai.com/v1"

    async def setup(self) -> None:
        """Create the SDK client, with the SDK's own retries off."""
        if self._client is None:
            self._client = _import_openai().AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, max_retries=0
            )
        await super().setup()

    async def close(self) -> None:
        """Close the SDK client's connections."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        await super().close()

    def _reasoning_model(self) -> bool:
        """OpenAI's reasoning models, by name (they take no ``max_tokens`` nor temperature)."""
        return bool(_REASONING_MODEL.match(self.model))

    def _reasoning_room(self, request: LLMRequest) -> int:
        """Tokens added to the answer's limit for reasoning: the effort's room for a reasoning
        model (or any model asked for an effort), else none."""
        if request.reasoning_effort is not None:
            return REASONING_ROOM[request.reasoning_effort]
        return REASONING_ROOM["medium"] if self._reasoning_model() else 0

    def _output_limit(self, request: LLMRequest) -> int:
        # What the budget reserves: the answer's limit and the reasoning's room.
        return (request.max_tokens or self.default_max_tokens) + self._reasoning_room(request)

    def _params(self, request: LLMRequest, n: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": message.role, "content": message.content} for message in request.messages
            ],
        }
        reasoning = self._reasoning_model()
        if not reasoning or request.temperature == 1.0:
            params["temperature"] = request.temperature
        extra = dict(request.options)
        # In the body rather than as arguments: older SDKs do not know the parameters.
        if request.reasoning_effort is not None:
            extra.setdefault("reasoning_effort", request.reasoning_effort)
        if request.max_tokens is not None:
            limit = request.max_tokens + self._reasoning_room(request)
            if reasoning:
                extra.setdefault("max_completion_tokens", limit)
            else:
                params["max_tokens"] = limit
        if n > 1:
            params["n"] = n
        if request.stop:
            params["stop"] = list(request.stop)
        if extra:
            params["extra_body"] = extra
        return params

    async def _complete_once(self, request: LLMRequest, n: int) -> ProviderReply:
        if not self._streaming:
            return await self._request(request, n, stream=False)
        try:
            reply = await self._request(request, n, stream=True)
        except LLMRequestError:
            if self._streamed:
                raise  # it streamed before: this request itself is rejected
            # A server that does not stream (or rejects stream_options) is asked again,
            # plainly; when that works, it is never streamed to again. A request it rejects
            # for another reason is rejected again, at no cost.
            reply = await self._request(request, n, stream=False)
            self._streaming = False
            return reply
        self._streamed = True
        return reply

    async def _request(self, request: LLMRequest, n: int, *, stream: bool) -> ProviderReply:
        if self._client is None:
            await self.setup()
        assert self._client is not None
        sdk = _import_openai()
        # The read timeout is the longest silence: before the reply, or between its pieces.
        timeout = sdk.Timeout(request.timeout, connect=min(10.0, request.timeout))
        params = self._params(request, n)
        if stream:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        try:
            response = await self._client.chat.completions.create(**params, timeout=timeout)
            if stream:
                return await self._read_stream(response)
        except (TransientError, LLMError):
            raise  # ours already, from reading the stream
        except Exception as exc:
            mapped = translate(
                exc, sdk, spec=self.spec, endpoint=self.endpoint, key_hint=self.key_hint
            )
            if mapped is None:
                # Not an API error: an SDK this code does not know (a changed signature, a
                # new exception). Still one clear line for the user; the cause stays chained.
                raise LLMError(
                    f"{self.spec}: unexpected error in the openai SDK: {type(exc).__name__}: {exc}"
                ) from exc
            raise mapped from None
        return self._parse(response)

    async def _read_stream(self, stream: Any) -> ProviderReply:
        """Gather a streamed reply: each choice's text pieces, its finish reason, the usage
        (sent last, with no choices) and the model's name."""
        pieces: dict[int, list[str]] = {}
        reasons: dict[int, str] = {}
        usage: object = None
        model: object = None
        try:
            async for chunk in stream:
                model = model or getattr(chunk, "model", None)
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or []:
                    index = getattr(choice, "index", 0)
                    index = index if isinstance(index, int) else 0
                    content = getattr(getattr(choice, "delta", None), "content", None)
                    texts = pieces.setdefault(index, [])
                    if isinstance(content, str):
                        texts.append(content)
                    reason = getattr(choice, "finish_reason", None)
                    if isinstance(reason, str):
                        reasons[index] = reason
        finally:
            await stream.close()
        if not pieces:
            raise TransientError("malformed_response", "the reply has no choices")
        order = sorted(pieces)
        return ProviderReply(
            texts=["".join(pieces[index]) for index in order],
            finish_reasons=[reasons.get(index) for index in order],
            model=model if isinstance(model, str) and model else None,
            **_usage_counts(usage),
        )

    def _parse(self, response: object) -> ProviderReply:
        """Read a chat completion defensively: servers differ, and some send garbage."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise TransientError("malformed_response", "the reply has no choices")
        texts: list[str] = []
        reasons: list[str | None] = []
        for choice in choices:
            message = getattr(choice, "message", None)
            content = getattr(message, "content", None)
            if content is None:
                content = ""  # a refusal, or a reasoning model that ran out of tokens
            if not isinstance(content, str):
                raise TransientError("malformed_response", "a choice's content is not text")
            texts.append(content)
            reason = getattr(choice, "finish_reason", None)
            reasons.append(reason if isinstance(reason, str) else None)
        usage = getattr(response, "usage", None)
        model = getattr(response, "model", None)
        return ProviderReply(
            texts=texts,
            finish_reasons=reasons,
            model=model if isinstance(model, str) and model else None,
            **_usage_counts(usage),
        )
