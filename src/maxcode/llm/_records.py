"""The typed records of the LLM layer: a request, a completion, and the logged call."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from maxcode.llm._errors import CallErrorKind

LLM_CALL_SCHEMA_VERSION = 1
"""Layout version of ``LLMCall`` as stored by the run store."""

Role = Literal["system", "user", "assistant"]


class _Record(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class Message(_Record):
    """One turn of a conversation."""

    role: Role
    """Who speaks: the system prompt, the user, or the model (an earlier answer)."""
    content: str
    """The text of the turn."""


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
    timeout: float = Field(default=120.0, gt=0.0)
    """Seconds one HTTP attempt may take, in total, before it is retried."""
    options: dict[str, Any] = {}
    """Provider settings (Anthropic ``thinking_budget``); other keys go into the request body."""
    purpose: str = ""
    """What the call is for (``policy``, ``critic``, ``check``); copied into the call record."""

    @classmethod
    def from_prompt(cls, prompt: str, system: str | None = None, **params: Any) -> LLMRequest:
        """A request of one user message, with an optional system message."""
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=prompt))
        return cls(messages=messages, **params)


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
    """Why generation stopped: ``stop``, ``length``, ... (None when the server did not say)."""
    cached: bool = False
    """Served from the response cache: nothing was sent, nothing was billed."""


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
