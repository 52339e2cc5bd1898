"""The LLM provider layer: one async interface to every model, with its accounting.

``resolve_model("openai/gpt-4o-mini")`` (or ``anthropic/...``, ``ollama/...``, ``vllm/...``,
``rules``, ``scripted``) gives an ``LLMProvider``; ``await provider.generate(request)`` gives
``Completion`` records. Retries, timeouts, the per-endpoint concurrency limit, the budget, the
opt-in response cache and the call log are the same for every provider. ``extract_code``
finds the program in an answer.
"""

from __future__ import annotations

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
    LLM_CALL_SCHEMA_VERSION,
    CallError,
    Completion,
    LLMCall,
    LLMRequest,
    Message,
)
from maxcode.llm._registry import known_providers, parse_model, register_provider, resolve_model
from maxcode.llm._scripted import ScriptedProvider, ScriptedReply
from maxcode.llm.extract import CodeBlock, extract_code, find_code_blocks
from maxcode.llm.rules import NO_MODEL_MESSAGE, RulesProvider, rewrite_variants

__all__ = [
    "DEFAULT_PRICES",
    "LLM_CALL_SCHEMA_VERSION",
    "NO_MODEL_MESSAGE",
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
]
