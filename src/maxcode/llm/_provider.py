"""The provider base class: one async ``generate`` for every backend.

A backend implements ``_complete_once`` (one HTTP request for up to n choices). The base class
wraps it with everything a search needs from any backend, so that each provider gets it the
same way: the response cache, the budget (reserve before sending, settle after), a
per-endpoint concurrency limit, the request's timeout (silence on the connection for backends
that stream; a total limit per attempt for the others), retries with exponential backoff and
jitter (``Retry-After`` honoured; a timed-out attempt is re-sent only when the retry policy
says, and the call record counts it), n emulated by parallel requests when a server returns
fewer choices than asked, and one ``LLMCall`` record per call, success or failure.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass, field
from types import TracebackType
from typing import ClassVar

from maxcode.llm._accounting import Budget, CallLog, Reservation
from maxcode.llm._cache import ResponseCache, cache_key
from maxcode.llm._errors import (
    CallErrorKind,
    LLMConfigError,
    LLMError,
    LLMUnavailableError,
    TransientError,
    UnreachableError,
    one_line,
)
from maxcode.llm._prices import ModelPrice, PriceTable
from maxcode.llm._records import CallError, Completion, LLMCall, LLMRequest

DEFAULT_CONCURRENCY = 8
"""Requests in flight per endpoint unless ``max_concurrency``/``MAXCODE_LLM_CONCURRENCY`` say."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed attempts are retried."""

    max_retries: int = 4
    """Retries after the first attempt for 429, 5xx, dropped connections, malformed replies
    (and timeouts, as far as ``timeout_retries`` allows)."""
    timeout_retries: int = 0
    """Re-sends of an attempt that got no answer within the request's timeout: a model that
    stayed silent that long is most likely still busy or gone, and a provider may bill the
    abandoned attempt, so by default it is not re-sent (the call fails, saying so)."""
    base_delay_s: float = 1.0
    """Backoff before the first retry; doubled for each further one."""
    max_delay_s: float = 30.0
    """Longest backoff between two attempts."""
    max_retry_after_s: float = 60.0
    """Longest wait a server's ``Retry-After`` can impose."""
    connect_retries: int = 2
    """Quick retries when a server that never answered refuses the connection."""
    connect_delay_s: float = 0.25
    """Pause between those quick retries."""

    def backoff_s(self, retry: int, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s * (1.0 + 0.1 * rng.random()), self.max_retry_after_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2.0**retry)
        return ceiling * (0.5 + 0.5 * rng.random())


@dataclass(frozen=True)
class ProviderSettings:
    """What every provider is configured with besides its model."""

    base_url: str | None = None
    """Endpoint override; None for the provider's default (or its environment variable)."""
    api_key: str | None = None
    """Key override; None to read it from the environment."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry behaviour."""
    budget: Budget | None = None
    """Spending limits shared by every provider of a run; None for no limit."""
    call_log: CallLog | None = None
    """Where every call is recorded; None to record nothing."""
    cache: ResponseCache | None = None
    """Response cache for temperature-0 requests; None (the default) disables caching."""
    prices: PriceTable | None = None
    """Price table; None for the built-in table plus ``MAXCODE_PRICES``."""
    max_concurrency: int | None = None
    """Requests in flight per endpoint; None for ``MAXCODE_LLM_CONCURRENCY`` or 8."""


@dataclass(frozen=True)
class ProviderReply:
    """What one request to a backend returned (before accounting)."""

    texts: list[str]
    """One text per choice, in order."""
    finish_reasons: list[str | None]
    """Why each choice stopped."""
    prompt_tokens: int | None
    """Input tokens the request was billed; None when the server did not report usage."""
    completion_tokens: int | None
    """Output tokens over all choices; None when unreported."""
    model: str | None = None
    """The model name the server reported."""
    cached_prompt_tokens: int | None = None
    """Of ``prompt_tokens``, those read from the prompt cache; None when unreported."""
    cache_write_tokens: int | None = None
    """Of ``prompt_tokens``, those written to the prompt cache; None when unreported."""
    reasoning_tokens: int | None = None
    """Of ``completion_tokens``, those spent reasoning; None when unreported."""


@dataclass
class _Tally:
    """Running totals of one call over its attempts and parallel requests."""

    attempts: int = 0
    replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_unknown: bool = False
    unreported_completions: int = 0
    cost_usd: float = 0.0
    cost_unknown: bool = False
    timeouts: int = 0
    cached_prompt_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    def add_details(self, reply: ProviderReply) -> None:
        """Add a reply's cache and reasoning counts (each stays None until one is reported)."""
        if reply.cached_prompt_tokens is not None:
            self.cached_prompt_tokens = (
                self.cached_prompt_tokens or 0
            ) + reply.cached_prompt_tokens
        if reply.cache_write_tokens is not None:
            self.cache_write_tokens = (self.cache_write_tokens or 0) + reply.cache_write_tokens
        if reply.reasoning_tokens is not None:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + reply.reasoning_tokens


_SEMAPHORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
_SEMAPHORES = weakref.WeakKeyDictionary()


def _endpoint_semaphore(endpoint: str, limit: int) -> asyncio.Semaphore:
    """The semaphore shared by every provider talking to ``endpoint`` in this event loop.

    The first provider to use an endpoint sets its limit. Semaphores are kept per event loop
    because an asyncio primitive cannot be shared between loops.
    """
    per_loop = _SEMAPHORES.setdefault(asyncio.get_running_loop(), {})
    semaphore = per_loop.get(endpoint)
    if semaphore is None:
        semaphore = per_loop[endpoint] = asyncio.Semaphore(limit)
    return semaphore


def _concurrency_limit(configured: int | None) -> int:
    if configured is not None:
        value = configured
    else:
        raw = os.environ.get("MAXCODE_LLM_CONCURRENCY", "").strip()
        if not raw:
            return DEFAULT_CONCURRENCY
        try:
            value = int(raw)
        except ValueError:
            raise LLMConfigError(f"MAXCODE_LLM_CONCURRENCY must be a number, not {raw!r}") from None
    if value < 1:
        raise LLMConfigError(f"the concurrency limit must be at least 1, not {value}")
    return value


def _split(total: int | None, parts: int) -> list[int | None]:
    """Divide a count among parts, remainder to the first, so that the parts sum to it."""
    if total is None:
        return [None] * parts
    share, remainder = divmod(total, parts)
    return [share + (remainder if index == 0 else 0) for index in range(parts)]


class LLMProvider(ABC):
    """A language-model backend behind one async interface.

    Use it as ``async with provider: completions = await provider.generate(request)``;
    ``setup`` runs on first use when not called. Subclasses implement ``_complete_once``
    and may override ``setup``/``close`` to create and release their client.
    """

    provider_name: str = ""
    """Registered name; instances may override it (``ollama`` is an OpenAI-compatible one)."""
    supports_n: ClassVar[bool] = True
    """Whether one request can ask for n choices; otherwise n requests run in parallel."""
    cacheable: ClassVar[bool] = True
    """Whether answers may be served from the response cache."""
    free: ClassVar[bool] = False
    """Offline providers: their calls cost 0 unless the price table says otherwise."""
    default_max_tokens: ClassVar[int] = 4096
    """Output limit assumed for budget estimates when a request sets none."""
    times_itself: ClassVar[bool] = False
    """The backend keeps the request's timeout itself, as silence on its connection (an SDK's
    read timeout, between the pieces of a streamed answer); otherwise the base class bounds
    each attempt's total time by it."""

    def __init__(
        self,
        model: str,
        settings: ProviderSettings | None = None,
        *,
        provider_name: str | None = None,
    ) -> None:
        self.model = model
        self.settings = settings if settings is not None else ProviderSettings()
        if provider_name is not None:
            self.provider_name = provider_name
        self.prices = self.settings.prices if self.settings.prices is not None else PriceTable()
        self.concurrency = _concurrency_limit(self.settings.max_concurrency)
        self._ready = False
        self._reached = False
        self._n_honoured = True
        self._rng = random.Random()

    # --- what a backend provides -------------------------------------------------------

    @abstractmethod
    async def _complete_once(self, request: LLMRequest, n: int) -> ProviderReply:
        """Send one request for ``n`` choices.

        Raise ``TransientError`` (``UnreachableError`` when no connection could be made) for
        failures worth retrying, an ``LLMError`` for final ones. The base class applies the
        timeout, the concurrency limit and the retries.
        """

    @property
    def base_url(self) -> str | None:
        """The endpoint requests go to; None for an offline provider or the SDK default."""
        return self.settings.base_url

    @property
    def endpoint(self) -> str:
        """A name for the endpoint, for messages and the concurrency limit."""
        return self.base_url or self.provider_name

    @property
    def spec(self) -> str:
        """``provider/model``, as a user writes it (just ``rules`` for the bare name)."""
        if self.model == self.provider_name:
            return self.provider_name
        return f"{self.provider_name}/{self.model}"

    def estimate_usage(self, request: LLMRequest) -> tuple[int, int]:
        """Upper estimates of a request's (input, output) tokens, reserved in the budget.

        Input: 3 bytes of UTF-8 per token (tokenizers average 3.5-4 on code and prose);
        output: the request's ``max_tokens`` (or the provider's default) per completion.
        """
        size = sum(len(message.content.encode("utf-8")) for message in request.messages)
        prompt = size // 3 + 8 * len(request.messages) + 16
        return request.n * prompt, request.n * self._output_limit(request)

    def estimate_tokens(self, request: LLMRequest) -> int:
        """An upper estimate of the tokens a request uses."""
        return sum(self.estimate_usage(request))

    def _output_limit(self, request: LLMRequest) -> int:
        return request.max_tokens or self.default_max_tokens

    async def setup(self) -> None:
        """Prepare the backend (create clients); called on first use if not called before."""
        self._ready = True

    async def close(self) -> None:
        """Release the backend's resources."""
        self._ready = False

    async def __aenter__(self) -> LLMProvider:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec} at {self.endpoint}>"

    # --- the one entry point -----------------------------------------------------------

    async def generate(self, request: LLMRequest) -> list[Completion]:
        """Ask for ``request.n`` completions.

        Raises ``BudgetExhausted`` before sending when the call might cross the budget,
        ``LLMConfigError`` for configuration problems, ``LLMUnavailableError`` when the
        server kept failing, ``LLMRequestError`` when it rejected the request.
        """
        if not self._ready:
            await self.setup()
        started = time.time()
        clock = time.perf_counter()
        tally = _Tally()
        cache = self.settings.cache
        key: str | None = None
        if cache is not None and self.cacheable and request.temperature == 0:
            key = cache_key(self.provider_name, self.model, request)
            hit = cache.get(key)
            if hit is not None and len(hit) >= request.n:
                served = [
                    completion.model_copy(
                        update={
                            "cached": True,
                            "cost_usd": 0.0,
                            "prompt_tokens": 0,
                            "completion_tokens": 0,
                            "latency_s": 0.0,
                        }
                    )
                    for completion in hit[: request.n]
                ]
                self._record(request, started, clock, tally, served, None, cached=True)
                return served
        reservation = self._reserve(request)
        try:
            completions = await self._generate_uncached(request, tally)
        except BaseException as exc:
            self._settle(reservation, request, tally)
            self._record(request, started, clock, tally, [], _call_error(exc), cached=False)
            raise
        self._settle(reservation, request, tally)
        self._record(request, started, clock, tally, completions, None, cached=False)
        if key is not None and cache is not None:
            cache.put(key, completions)
        return completions

    # --- budget --------------------------------------------------------------------------

    def _price(self, reported_model: str | None = None) -> ModelPrice | None:
        price = self.prices.lookup(self.model, self.provider_name)
        if price is None and reported_model and reported_model != self.model:
            price = self.prices.lookup(reported_model, self.provider_name)
        if price is None and self.free:
            return ModelPrice(0.0, 0.0)
        return price

    def _reserve(self, request: LLMRequest) -> Reservation | None:
        budget = self.settings.budget
        if budget is None:
            return None
        prompt_tokens, output_tokens = self.estimate_usage(request)
        usd = 0.0
        if budget.max_usd is not None:
            price = self._price()
            if price is None:
                raise LLMConfigError(
                    f"cannot keep to a USD budget: the price of {self.spec} is unknown; "
                    "give it in a MAXCODE_PRICES file"
                )
            usd = price.cost(prompt_tokens, output_tokens)
        tokens = prompt_tokens + output_tokens
        return budget.reserve(tokens, usd)

    def _settle(self, reservation: Reservation | None, request: LLMRequest, tally: _Tally) -> None:
        budget = self.settings.budget
        if budget is None or reservation is None:
            return
        # A reply without usage is charged its estimate.
        prompt_estimate, output_estimate = self.estimate_usage(request)
        unreported = tally.unreported_completions
        tokens = tally.prompt_tokens + tally.completion_tokens
        tokens += unreported * (prompt_estimate + output_estimate) // request.n
        usd = tally.cost_usd
        price = self._price()
        if unreported and price is not None:
            usd += unreported * price.cost(prompt_estimate, output_estimate) / request.n
        budget.settle(reservation, tokens, usd)

    # --- attempts ------------------------------------------------------------------------

    async def _generate_uncached(self, request: LLMRequest, tally: _Tally) -> list[Completion]:
        wanted = request.n
        if wanted > 1 and (not self.supports_n or not self._n_honoured):
            parts = await _gather_all(
                [self._send_with_retries(request, 1, tally) for _ in range(wanted)]
            )
            return [completion for part in parts for completion in part][:wanted]
        completions = await self._send_with_retries(request, wanted, tally)
        if len(completions) < wanted:
            # The server ignores n (many OpenAI-compatible servers do): ask for the rest in
            # parallel, and from now on go parallel from the start.
            self._n_honoured = False
            parts = await _gather_all(
                [
                    self._send_with_retries(request, 1, tally)
                    for _ in range(wanted - len(completions))
                ]
            )
            completions += [completion for part in parts for completion in part]
        return completions[:wanted]

    async def _send_with_retries(
        self, request: LLMRequest, n: int, tally: _Tally
    ) -> list[Completion]:
        policy = self.settings.retry
        semaphore = _endpoint_semaphore(self.endpoint, self.concurrency)
        retries = 0
        refused = 0
        attempts = 0
        timeouts = 0
        while True:
            tally.attempts += 1
            attempts += 1
            async with semaphore:
                began = time.perf_counter()
                try:
                    attempt = self._complete_once(request, n)
                    if self.times_itself:
                        reply = await attempt
                    else:
                        reply = await asyncio.wait_for(attempt, timeout=request.timeout)
                except asyncio.TimeoutError:
                    failure = TransientError("timeout", f"no reply within {request.timeout:g} s")
                except UnreachableError as exc:
                    failure = exc
                except TransientError as exc:
                    failure = exc
                else:
                    self._reached = True
                    return self._account(reply, time.perf_counter() - began, tally)
            if isinstance(failure, UnreachableError) and not self._reached:
                # Nothing has ever answered here: most likely a wrong URL or a server that
                # is not running. Say so quickly instead of backing off for minutes.
                refused += 1
                if refused > policy.connect_retries:
                    raise LLMConfigError(
                        f"{self.spec}: cannot reach {self.endpoint}: {failure.message}",
                        kind="unreachable",
                    )
                await asyncio.sleep(policy.connect_delay_s)
                continue
            if failure.kind == "timeout":
                timeouts += 1
                tally.timeouts += 1
                if timeouts > policy.timeout_retries:
                    raise LLMUnavailableError(
                        self._timeout_message(request, attempts, timeouts), kind="timeout"
                    )
            if retries >= policy.max_retries:
                raise LLMUnavailableError(
                    f"{self.spec} at {self.endpoint}: {failure.message} "
                    f"(gave up after {attempts} attempts)",
                    kind=failure.kind,
                )
            delay = policy.backoff_s(retries, failure.retry_after_s, self._rng)
            retries += 1
            await asyncio.sleep(delay)

    def _timeout_message(self, request: LLMRequest, attempts: int, timeouts: int) -> str:
        """What a call that timed out for good says: which request, after how long, and how
        many attempts were sent (each may be billed)."""
        which = f"the {request.purpose} request" if request.purpose else "the request"
        sent = f"{attempts} attempt{'s' if attempts != 1 else ''} sent"
        late = "it" if attempts == 1 else f"{timeouts} of them"
        resent = (
            "" if self.settings.retry.timeout_retries else "; a timed-out request is not re-sent"
        )
        return (
            f"{self.spec} at {self.endpoint}: {which} got no answer within "
            f"{request.timeout:g} s of silence ({sent}, {late} timed out and may still be "
            f"billed{resent}); allow slower answers with --request-timeout"
        )

    def _account(self, reply: ProviderReply, latency_s: float, tally: _Tally) -> list[Completion]:
        count = len(reply.texts)
        if count == 0:
            return []
        tally.replies += 1
        tally.add_details(reply)
        model = reply.model or self.model
        price = self._price(reply.model)
        cached = reply.cached_prompt_tokens or 0
        written = reply.cache_write_tokens or 0
        if reply.prompt_tokens is None or reply.completion_tokens is None:
            tally.usage_unknown = True
            tally.unreported_completions += count
            tally.cost_unknown = True
        else:
            tally.prompt_tokens += reply.prompt_tokens
            tally.completion_tokens += reply.completion_tokens
            if price is None:
                tally.cost_unknown = True
            else:
                tally.cost_usd += price.cost(
                    reply.prompt_tokens, reply.completion_tokens, cached, written
                )
        prompt_shares = _split(reply.prompt_tokens, count)
        completion_shares = _split(reply.completion_tokens, count)
        cached_shares = _split(reply.cached_prompt_tokens, count)
        written_shares = _split(written, count)
        reasoning_shares = _split(reply.reasoning_tokens, count)
        completions = []
        for index, text in enumerate(reply.texts):
            prompt_tokens = prompt_shares[index]
            completion_tokens = completion_shares[index]
            cost = (
                price.cost(
                    prompt_tokens,
                    completion_tokens,
                    cached_shares[index] or 0,
                    written_shares[index] or 0,
                )
                if price is not None and prompt_tokens is not None and completion_tokens is not None
                else None
            )
            reasons = reply.finish_reasons
            completions.append(
                Completion(
                    text=text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    latency_s=latency_s,
                    cost_usd=cost,
                    model=model,
                    finish_reason=reasons[index] if index < len(reasons) else None,
                    cached_prompt_tokens=cached_shares[index],
                    reasoning_tokens=reasoning_shares[index],
                )
            )
        return completions

    # --- accounting ----------------------------------------------------------------------

    def _record(
        self,
        request: LLMRequest,
        started: float,
        clock: float,
        tally: _Tally,
        completions: list[Completion],
        error: CallError | None,
        *,
        cached: bool,
    ) -> None:
        call_log = self.settings.call_log
        if call_log is None:
            return
        if cached:
            prompt_tokens: int | None = 0
            completion_tokens: int | None = 0
            cost: float | None = 0.0
        else:
            prompt_tokens = None if tally.usage_unknown else tally.prompt_tokens
            completion_tokens = None if tally.usage_unknown else tally.completion_tokens
            if tally.cost_unknown:
                cost = None
            elif tally.replies:
                cost = tally.cost_usd
            else:
                # Every attempt failed: nothing was billed, a known zero if the price is known.
                cost = 0.0 if self._price() is not None else None
        call_log.record(
            LLMCall(
                timestamp=started,
                provider=self.provider_name,
                model=self.model,
                base_url=self.base_url,
                purpose=request.purpose,
                messages=request.messages,
                n=request.n,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                responses=[completion.text for completion in completions],
                finish_reasons=[completion.finish_reason for completion in completions],
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost,
                latency_s=time.perf_counter() - clock,
                attempts=tally.attempts,
                error=error,
                cached=cached,
                cached_prompt_tokens=0 if cached else tally.cached_prompt_tokens,
                cache_write_tokens=0 if cached else tally.cache_write_tokens,
                reasoning_tokens=0 if cached else tally.reasoning_tokens,
                reasoning_effort=request.reasoning_effort,
                timeout_s=request.timeout,
                timeouts=tally.timeouts,
            )
        )


async def _gather_all(coroutines: list[Awaitable[list[Completion]]]) -> list[list[Completion]]:
    """Run requests in parallel; wait for all (so that their usage is accounted), then raise
    the first failure if any."""
    results = await asyncio.gather(*coroutines, return_exceptions=True)
    parts: list[list[Completion]] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        parts.append(result)
    return parts


def _call_error(exc: BaseException) -> CallError:
    kind: CallErrorKind
    if isinstance(exc, LLMError):
        kind = exc.kind
    elif isinstance(exc, asyncio.CancelledError):
        kind = "cancelled"
    else:
        kind = "other"
    message = str(exc) or type(exc).__name__
    if kind == "other" and not isinstance(exc, LLMError):
        message = f"{type(exc).__name__}: {message}"
    return CallError(kind=kind, message=one_line(message))
