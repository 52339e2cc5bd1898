"""The typed records of the LLM layer: a request, a completion, and the logged call."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from maxcode.llm._errors import CallErrorKind

LLM_CALL_SCHEMA_VERSION = 2
"""Layout version of ``LLMCall`` as stored by the run store (2: timed-out attempts, the request
timeout, reasoning effort, cached, cache-write and reasoning tokens)."""

DEFAULT_REQUEST_TIMEOUT_S = 600.0
"""Seconds a model may stay silent before a request is given up: the SDKs' own default."""

Role = Literal["system", "user", "assistant"]

ReasoningEffort = Literal["low", "medium", "high"]
"""How hard a reasoning model thinks before it answers."""

REASONING_ROOM: dict[str, int] = {"low": 2048, "medium": 8192, "high": 24576}
"""Tokens of thinking per effort level, on top of the answer's own limit: Anthropic's thinking
``budget_tokens``; for OpenAI reasoning models, the room added to ``max_completion_tokens``
(which covers reasoning and answer together). ``high`` with a 4096-token answer stays within
the smallest output limit of a thinking model (32000)."""


class _Record(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class Message(_Record):
    """One turn of a conversation."""

    role: Role
    """Who speaks: the system prompt, the user, or the model (an earlier answer)."""
    content: str
    """The text of the turn."""
    cache_prefix: int = Field(default=0, ge=0)
    """Characters at the start of this turn that recur unchanged in later calls (with every
    turn before it): a provider with an explicit prompt cache (Anthropic) marks the
    conversation up to there for it; 0: nothing marked."""


class LLMRequest(_Record):
    """What to ask a model; the same record for every provider."""

    messages: list[Message] = Field(min_length=1)
    """The conversation, system message first when there is one."""
    n: int = Field(default=1, ge=1)
    """How many independent completions to return."""
    temperature: float = Field(default=0.7, ge=0.0)
    """Sampling temperature; 0 makes the request cacheable."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens to generate per completion; None lets the provider choose."""
    stop: list[str] = []
    """Sequences that end a completion."""
    timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0.0)
    """Seconds the model may stay silent: the wait for a reply, or between two pieces of a
    streamed one; an attempt that times out is re-sent only as ``RetryPolicy.timeout_retries``
    says."""
    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks (OpenAI ``reasoning_effort``; Anthropic's thinking
    budget, ``REASONING_ROOM``); None: the provider's default. Apart from ``max_tokens``."""
    options: dict[str, Any] = {}
    """Provider settings (Anthropic ``thinking_budget``); other keys go into the request body."""
    purpose: str = ""
    """What the call is for (``policy``, ``critic``, ``check``); copied into the call record."""

    @classmethod
    def from_prompt(
        cls, prompt: str, system: str | None = None, *, cache_prefix: int = 0, **params: Any
    ) -> LLMRequest:
        """A request of one user message, with an optional system message; ``cache_prefix``
        characters of the prompt (with the system message) recur in later calls."""
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=prompt, cache_prefix=cache_prefix))
        return cls(messages=messages, **params)


def stable_prefix(text: str, stable_part: str, least_after: int = 200) -> int:
    """Characters of ``text`` through the first occurrence of ``stable_part`` (a prompt's task
    and reference, which every call of a run repeats): what to mark for a prompt cache. 0 when
    ``stable_part`` is not in ``text`` or fewer than ``least_after`` characters follow it (a
    prompt that ends with it is never repeated as a prefix)."""
    part = stable_part.rstrip()
    start = text.find(part) if part else -1
    if start < 0:
        return 0
    end = start + len(part)
    return end if len(text) - end >= least_after else 0


class Completion(_Record):
    """One answer of a model."""

    text: str
    """The generated text (reasoning or thinking blocks excluded)."""
    prompt_tokens: int | None
    """Input tokens billed (a request's usage is split among its choices); None if unreported."""
    completion_tokens: int | None
    """Output tokens billed for this completion (thinking included); None when unreported."""
    latency_s: float
    """Seconds the HTTP request that produced this completion took."""
    cost_usd: float | None
    """Price of this completion's tokens; None when the model's price is unknown (never 0)."""
    model: str
    """The model that answered, as the server named it (falls back to the requested name)."""
    finish_reason: str | None
    """Why generation stopped: ``stop``, ``length`` (cut at the output limit), ... (None when
    the server did not say)."""
    cached: bool = False
    """Served from the response cache: nothing was sent, nothing was billed."""
    cached_prompt_tokens: int | None = None
    """Of ``prompt_tokens``, those read from the provider's prompt cache; None when unreported."""
    reasoning_tokens: int | None = None
    """Of ``completion_tokens``, those spent reasoning; None when unreported."""


class CallError(_Record):
    """Why a call failed."""

    kind: CallErrorKind
    """The class of failure (``auth``, ``rate_limit``, ``timeout``, ...)."""
    message: str
    """One line a person can act on."""


def _now() -> float:
    return time.time()


def _new_id() -> str:
    return uuid.uuid4().hex


class LLMCall(_Record):
    """One call to a provider, successful or not: what the run store records."""

    schema_version: int = LLM_CALL_SCHEMA_VERSION
    """Layout version of this record."""
    call_id: str = Field(default_factory=_new_id)
    """A unique id (hex)."""
    timestamp: float = Field(default_factory=_now)
    """Unix time at which the call started."""
    provider: str
    """The provider's registered name (``openai``, ``anthropic``, ``rules``, ...)."""
    model: str
    """The model as requested (the part after ``provider/``)."""
    base_url: str | None
    """The endpoint the call went to; None for the provider's default or an offline provider."""
    purpose: str
    """What the call was for, from the request."""
    messages: list[Message]
    """The request's conversation."""
    n: int
    """Completions asked for."""
    temperature: float
    """Sampling temperature of the request."""
    max_tokens: int | None
    """Output limit of the request."""
    responses: list[str]
    """The completions' texts (empty when the call failed)."""
    finish_reasons: list[str | None]
    """Why each completion stopped, in the order of ``responses``."""
    prompt_tokens: int | None
    """Input tokens billed over every HTTP request of the call; None when unreported."""
    completion_tokens: int | None
    """Output tokens billed over every HTTP request of the call; None when unreported."""
    cost_usd: float | None
    """Total price; None when the model's price is unknown; 0 for cached and offline calls."""
    latency_s: float
    """Seconds from the start of the call to its end, retries included."""
    attempts: int
    """HTTP requests sent (retries and parallel requests emulating n included)."""
    error: CallError | None
    """None on success; otherwise what went wrong."""
    cached: bool
    """Served from the response cache."""
    cached_prompt_tokens: int | None = None
    """Of ``prompt_tokens``, those read from the provider's prompt cache (billed at its cached
    price); None when the server did not say."""
    cache_write_tokens: int | None = None
    """Of ``prompt_tokens``, those written to the provider's prompt cache (Anthropic bills them
    above the input price); None when the server did not say."""
    reasoning_tokens: int | None = None
    """Of ``completion_tokens``, those spent reasoning (OpenAI reports them; Anthropic's thinking
    is counted in the output only); None when unreported."""
    reasoning_effort: ReasoningEffort | None = None
    """The request's reasoning effort."""
    timeout_s: float | None = None
    """Seconds of silence each attempt was allowed (None: a call recorded before it was kept)."""
    timeouts: int = 0
    """Attempts that got no answer within ``timeout_s`` (part of ``attempts``; a provider may
    bill an attempt it was still answering)."""
