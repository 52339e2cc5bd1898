"""Anthropic's Messages API through the ``anthropic`` SDK, imported only when used.

The SDK is an optional extra (``pip install 'maxcode[anthropic]'``). The Messages API returns
one answer per request, so n completions are n parallel requests. Extended thinking is the
``thinking_budget`` option (tokens, at least 1024); thinking blocks are not part of the text,
but their tokens are billed as output and counted as such.
"""

from __future__ import annotations

import importlib
import inspect
import os
from types import ModuleType
from typing import Any

from maxcode.llm._errors import LLMConfigError, LLMError, ProviderNotInstalled, TransientError
from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings
from maxcode.llm._records import LLMRequest
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


class AnthropicProvider(LLMProvider):
    """Claude models through ``AsyncAnthropic``."""

    provider_name = "anthropic"
    supports_n = False

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
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        turns: list[dict[str, str]] = []
        for message in request.messages:
            if message.role == "system":
                continue
            if turns and turns[-1]["role"] == message.role:
                turns[-1]["content"] += "\n\n" + message.content  # the API wants alternation
            else:
                turns.append({"role": message.role, "content": message.content})
        params: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": self._output_limit(request),
        }
        if system:
            params["system"] = system
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
        timeout = self._sdk.Timeout(request.timeout, connect=min(5.0, request.timeout))
        params = self._params(request)
        try:
            response = await self._client.messages.create(**params, timeout=timeout)
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
        return self._parse(response)

    def _parse(self, response: object) -> ProviderReply:
        content = getattr(response, "content", None)
        if not isinstance(content, list):
            raise TransientError("malformed_response", "the reply has no content blocks")
        text = "".join(
            block.text
            for block in content
            if getattr(block, "type", None) == "text"
            and isinstance(getattr(block, "text", None), str)
        )
        usage = getattr(response, "usage", None)
        stop_reason = getattr(response, "stop_reason", None)
        model = getattr(response, "model", None)
        return ProviderReply(
            texts=[text],
            finish_reasons=[
                _STOP_REASONS.get(stop_reason, stop_reason)
                if isinstance(stop_reason, str)
                else None
            ],
            prompt_tokens=_as_int(getattr(usage, "input_tokens", None)),
            completion_tokens=_as_int(getattr(usage, "output_tokens", None)),
            model=model if isinstance(model, str) and model else None,
        )
