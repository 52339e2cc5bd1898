"""Providers by name, and the one function that turns ``provider/model`` into a provider."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from maxcode.llm._accounting import Budget, CallLog
from maxcode.llm._cache import ResponseCache
from maxcode.llm._errors import LLMConfigError
from maxcode.llm._prices import PriceTable
from maxcode.llm._provider import LLMProvider, ProviderSettings, RetryPolicy

ProviderFactory = Callable[..., LLMProvider]
"""Builds a provider: ``factory(model, settings, **provider_options)``."""


@functools.cache
def _builtin() -> dict[str, tuple[ProviderFactory, bool]]:
    # Imported here so that ``maxcode.llm`` loads without touching any SDK until used.
    from maxcode.llm._anthropic import AnthropicProvider
    from maxcode.llm._openai import OpenAIProvider
    from maxcode.llm._scripted import ScriptedProvider
    from maxcode.llm.rules import RulesProvider

    def openai_compatible(name: str, default_base_url: str) -> ProviderFactory:
        def build(model: str, settings: ProviderSettings, **options: Any) -> LLMProvider:
            return OpenAIProvider(
                model, settings, provider_name=name, default_base_url=default_base_url, **options
            )

        return build

    return {
        "openai": (OpenAIProvider, True),
        "anthropic": (AnthropicProvider, True),
        "ollama": (openai_compatible("ollama", "http://localhost:11434/v1"), True),
        "vllm": (openai_compatible("vllm", "http://localhost:8000/v1"), True),
        "rules": (RulesProvider, False),
        "scripted": (ScriptedProvider, False),
    }


_REGISTERED: dict[str, tuple[ProviderFactory, bool]] = {}


def register_provider(name: str, factory: ProviderFactory, *, needs_model: bool = True) -> None:
    """Make ``name/<model>`` resolve to ``factory(model, settings, **options)``.

    ``needs_model=False`` lets the bare name resolve too (like ``rules``).
    """
    _REGISTERED[name.lower()] = (factory, needs_model)


def known_providers() -> list[str]:
    """Registered provider names, sorted."""
    return sorted({**_builtin(), **_REGISTERED})


def parse_model(spec: str) -> tuple[str, str]:
    """Split ``provider/model`` (the model may contain further slashes)."""
    provider, _, model = spec.strip().partition("/")
    return provider.lower(), model


def resolve_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    retry: RetryPolicy | None = None,
    budget: Budget | None = None,
    call_log: CallLog | None = None,
    cache: ResponseCache | None = None,
    prices: PriceTable | None = None,
    max_concurrency: int | None = None,
    **provider_options: Any,
) -> LLMProvider:
    """The provider for ``provider/model`` (``openai/gpt-4o-mini``, ``rules``, ...).

    Raises ``LLMConfigError`` (one line) for an unknown provider, a missing model name, a
    missing key or SDK. Nothing is sent until the first ``generate``.
    """
    provider, model = parse_model(spec)
    registry = {**_builtin(), **_REGISTERED}
    if provider not in registry:
        raise LLMConfigError(
            f"unknown model provider {provider!r} in {spec!r}; write provider/model with "
            f"provider one of: {', '.join(known_providers())}"
        )
    factory, needs_model = registry[provider]
    if needs_model and not model:
        raise LLMConfigError(f"{spec!r} names no model; write {provider}/<model>")
    settings = ProviderSettings(
        base_url=base_url or None,
        api_key=api_key or None,
        retry=retry if retry is not None else RetryPolicy(),
        budget=budget,
        call_log=call_log,
        cache=cache,
        prices=prices,
        max_concurrency=max_concurrency,
    )
    return factory(model or provider, settings, **provider_options)
