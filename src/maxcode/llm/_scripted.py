"""The scripted provider: replies from a list, through the real provider code path.

Tests and demos hand it the answers a model would give. Each completion takes the next reply;
a reply can also carry token usage, a delay, or a failure to simulate (a transient kind such
as ``rate_limit`` is retried like a real one; ``auth``/``not_found`` are configuration errors).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from maxcode.llm._errors import CallErrorKind, LLMConfigError, TransientError
from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings
from maxcode.llm._records import LLMRequest


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted answer (or failure)."""

    text: str = ""
    """The completion's text."""
    prompt_tokens: int | None = 0
    """Input tokens to report (None: report no usage)."""
    completion_tokens: int | None = 0
    """Output tokens to report (None: report no usage)."""
    delay_s: float = 0.0
    """Seconds to wait before answering (to simulate a slow model)."""
    error: CallErrorKind | None = None
    """Fail this attempt instead: ``auth``/``not_found`` are final, other kinds transient."""
    finish_reason: str = "stop"
    """Why the answer stopped: ``length`` for one cut at the output limit."""


Reply = str | ScriptedReply | Callable[[LLMRequest], str]
"""A scripted reply: text, a full ``ScriptedReply``, or a function of the request."""

_FINAL_KINDS: set[CallErrorKind] = {"auth", "not_found", "config"}


class ScriptedProvider(LLMProvider):
    """Answers with the given replies in order; raises a config error when they run out."""

    provider_name = "scripted"
    free = True

    def __init__(
        self,
        model: str = "scripted",
        settings: ProviderSettings | None = None,
        *,
        replies: Iterable[Reply] = (),
        cycle: bool = False,
        provider_name: str | None = None,
    ) -> None:
        super().__init__(model, settings, provider_name=provider_name)
        self._replies = list(replies)
        self._cycle = cycle
        self._next = 0
        self.requests: list[LLMRequest] = []
        """Every request received (one per attempt), for tests to inspect."""

    @property
    def remaining(self) -> int:
        """Replies not yet used (ignores cycling)."""
        return max(len(self._replies) - self._next, 0)

    def _take(self) -> Reply:
        if self._next >= len(self._replies):
            if not self._cycle or not self._replies:
                raise LLMConfigError(
                    f"{self.spec}: no scripted reply left ({len(self._replies)} given)"
                )
            self._next = 0
        reply = self._replies[self._next]
        self._next += 1
        return reply

    async def _complete_once(self, request: LLMRequest, n: int) -> ProviderReply:
        self.requests.append(request)
        used: list[ScriptedReply] = []
        for _ in range(n):
            reply = self._take()
            if callable(reply):
                reply = reply(request)
            if isinstance(reply, str):
                reply = ScriptedReply(text=reply)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.error in _FINAL_KINDS:
                raise LLMConfigError(f"{self.spec}: scripted {reply.error} error", kind=reply.error)
            if reply.error is not None:
                raise TransientError(reply.error, f"scripted {reply.error} error")
            used.append(reply)
        # One request is billed its prompt once, and the output of every choice.
        prompt_counts = [reply.prompt_tokens for reply in used]
        output_counts = [reply.completion_tokens for reply in used]
        return ProviderReply(
            texts=[reply.text for reply in used],
            finish_reasons=[reply.finish_reason for reply in used],
            prompt_tokens=None if None in prompt_counts else prompt_counts[0],
            completion_tokens=None if None in output_counts else sum(filter(None, output_counts)),
            model=self.model,
        )
