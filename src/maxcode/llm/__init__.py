"""The LLM provider layer: one async interface to every model, with its accounting.

``resolve_model("openai/gpt-4o-mini")`` (or ``anthropic/...``, ``ollama/...``, ``vllm/...``,
``rules``, ``scripted``) gives an ``LLMProvider``; ``await provider.generate(request)`` gives
``Completion`` records. Retries, timeouts, the per-endpoint concurrency limit, the budget, the
opt-in response cache and the call log are the same for every provider; so are the reasoning
effort (``LLMRequest.reasoning_effort``) and the marks for a provider's prompt cache
(``Message.cache_prefix``, found with ``stable_prefix``). ``extract_code`` finds the program in
an answer.

The names below load on first use: ``import maxcode.llm._records`` (what the store needs) does
not load the providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maxcode.kinds.answers import CodeBlock, extract_code, find_code_blocks
    from maxcode.llm._accounting import Budget, CallLog, InMemoryCallLog, Reservation
    from maxcode.llm._anthropic import AnthropicProvider
    from maxcode.llm._cache import (
        InMemoryResponseCache,
        ResponseCache,
        SQLiteResponseCache,
        cache_key,
    )
    from maxcode.llm._errors import (
        BudgetExhausted,
        CallErrorKind,
        LLMConfigError,
        LLMError,
        LLMRequestError,
        LLMUnavailableError,
        ProviderNotInstalled,
    )
    from maxcode.llm._openai import OpenAIProvider
    from maxcode.llm._prices import DEFAULT_PRICES, ModelPrice, PriceTable
    from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings, RetryPolicy
    from maxcode.llm._records import (
        DEFAULT_REQUEST_TIMEOUT_S,
        LLM_CALL_SCHEMA_VERSION,
        REASONING_ROOM,
        CallError,
        Completion,
        LLMCall,
        LLMRequest,
        Message,
        ReasoningEffort,
        stable_prefix,
    )
    from maxcode.llm._registry import known_providers, parse_model, register_provider, resolve_model
    from maxcode.llm._scripted import ScriptedProvider, ScriptedReply
    from maxcode.llm.rules import NO_MODEL_MESSAGE, RulesProvider, rewrite_variants

_WHERE = {
    "Budget": "maxcode.llm._accounting",
    "CallLog": "maxcode.llm._accounting",
    "InMemoryCallLog": "maxcode.llm._accounting",
    "Reservation": "maxcode.llm._accounting",
    "AnthropicProvider": "maxcode.llm._anthropic",
    "InMemoryResponseCache": "maxcode.llm._cache",
    "ResponseCache": "maxcode.llm._cache",
    "SQLiteResponseCache": "maxcode.llm._cache",
    "cache_key": "maxcode.llm._cache",
    "BudgetExhausted": "maxcode.llm._errors",
    "CallErrorKind": "maxcode.llm._errors",
    "LLMConfigError": "maxcode.llm._errors",
    "LLMError": "maxcode.llm._errors",
    "LLMRequestError": "maxcode.llm._errors",
    "LLMUnavailableError": "maxcode.llm._errors",
    "ProviderNotInstalled": "maxcode.llm._errors",
    "OpenAIProvider": "maxcode.llm._openai",
    "DEFAULT_PRICES": "maxcode.llm._prices",
    "ModelPrice": "maxcode.llm._prices",
    "PriceTable": "maxcode.llm._prices",
    "LLMProvider": "maxcode.llm._provider",
    "ProviderReply": "maxcode.llm._provider",
    "ProviderSettings": "maxcode.llm._provider",
    "RetryPolicy": "maxcode.llm._provider",
    "DEFAULT_REQUEST_TIMEOUT_S": "maxcode.llm._records",
    "LLM_CALL_SCHEMA_VERSION": "maxcode.llm._records",
    "REASONING_ROOM": "maxcode.llm._records",
    "ReasoningEffort": "maxcode.llm._records",
    "stable_prefix": "maxcode.llm._records",
    "CallError": "maxcode.llm._records",
    "Completion": "maxcode.llm._records",
    "LLMCall": "maxcode.llm._records",
    "LLMRequest": "maxcode.llm._records",
    "Message": "maxcode.llm._records",
    "known_providers": "maxcode.llm._registry",
    "parse_model": "maxcode.llm._registry",
    "register_provider": "maxcode.llm._registry",
    "resolve_model": "maxcode.llm._registry",
    "ScriptedProvider": "maxcode.llm._scripted",
    "ScriptedReply": "maxcode.llm._scripted",
    "CodeBlock": "maxcode.kinds.answers",
    "extract_code": "maxcode.kinds.answers",
    "find_code_blocks": "maxcode.kinds.answers",
    "NO_MODEL_MESSAGE": "maxcode.llm.rules",
    "RulesProvider": "maxcode.llm.rules",
    "rewrite_variants": "maxcode.llm.rules",
}

__all__ = [
    "DEFAULT_PRICES",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "LLM_CALL_SCHEMA_VERSION",
    "NO_MODEL_MESSAGE",
    "REASONING_ROOM",
    "AnthropicProvider",
    "Budget",
    "BudgetExhausted",
    "CallError",
    "CallErrorKind",
    "CallLog",
    "CodeBlock",
    "Completion",
    "InMemoryCallLog",
    "InMemoryResponseCache",
    "LLMCall",
    "LLMConfigError",
    "LLMError",
    "LLMProvider",
    "LLMRequest",
    "LLMRequestError",
    "LLMUnavailableError",
    "Message",
    "ModelPrice",
    "OpenAIProvider",
    "PriceTable",
    "ProviderNotInstalled",
    "ProviderReply",
    "ProviderSettings",
    "ReasoningEffort",
    "Reservation",
    "ResponseCache",
    "RetryPolicy",
    "RulesProvider",
    "SQLiteResponseCache",
    "ScriptedProvider",
    "ScriptedReply",
    "cache_key",
    "extract_code",
    "find_code_blocks",
    "known_providers",
    "parse_model",
    "register_provider",
    "resolve_model",
    "rewrite_variants",
    "stable_prefix",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'maxcode.llm' has no attribute {name!r}")
