"""The openai provider against a fake OpenAI-compatible server, through the real SDK."""

from __future__ import annotations

import asyncio
import random

import pytest

from maxcode.errors import MaxcodeError
from maxcode.llm import (
    REASONING_ROOM,
    Completion,
    InMemoryCallLog,
    LLMConfigError,
    LLMError,
    LLMProvider,
    LLMRequest,
    LLMRequestError,
    LLMUnavailableError,
    RetryPolicy,
    extract_code,
    resolve_model,
)
from tests.llm.fake_llm_server import FakeLLMServer, Step


def _provider(
    server: FakeLLMServer, retry: RetryPolicy, log: InMemoryCallLog, model: str = "gpt-4o-mini"
) -> LLMProvider:
    return resolve_model(f"openai/{model}", base_url=server.url, retry=retry, call_log=log)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds the provider asks to wait between its tries, in order (waited as 0)."""
    from maxcode.llm import _provider as module

    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(delay: float, *args: object) -> None:
        asked.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(module.asyncio, "sleep", recorded)
    return asked


def _generate(provider: LLMProvider, request: LLMRequest) -> list[Completion]:
    async def run() -> list[Completion]:
        async with provider:
            return await provider.generate(request)

    return asyncio.run(run())


def test_normal_answer_with_usage_and_cost(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(Step(texts=["```cpp\nint main() {}\n```"], prompt_tokens=100))
    log = InMemoryCallLog()
    request = LLMRequest.from_prompt("make it fast", system="be brief", max_tokens=50, stop=["END"])
    [completion] = _generate(_provider(fake_server, fast_retry, log), request)
    assert completion.text == "```cpp\nint main() {}\n```"
    assert (completion.prompt_tokens, completion.completion_tokens) == (100, 5)
    assert completion.cost_usd == pytest.approx((100 * 0.15 + 5 * 0.60) / 1e6)
    assert completion.finish_reason == "stop"
    assert extract_code(completion.text, "cpp") == "int main() {}\n"
    sent = fake_server.seen[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent.body["max_tokens"] == 50 and sent.body["stop"] == ["END"]
    [call] = log.calls
    assert call.error is None and call.responses == [completion.text]
    assert (call.provider, call.model, call.attempts) == ("openai", "gpt-4o-mini", 1)
    assert call.cost_usd == pytest.approx(completion.cost_usd)


def test_n_choices_in_one_request(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    fake_server.script(Step(texts=["a", "b", "c"], prompt_tokens=30, completion_tokens=4))
    log = InMemoryCallLog()
    completions = _generate(
        _provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x", n=3)
    )
    assert [c.text for c in completions] == ["a", "b", "c"]
    assert fake_server.count() == 1 and fake_server.seen[0].body["n"] == 3
    # Usage is shared among the choices so that sums are exact.
    assert sum(c.prompt_tokens or 0 for c in completions) == 30
    assert sum(c.completion_tokens or 0 for c in completions) == 12
    assert log.calls[0].prompt_tokens == 30 and log.calls[0].completion_tokens == 12


def test_server_ignoring_n_is_emulated_by_parallel_requests(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    # First call: 1 request with n=4 that returned 1 choice, then 3 more side by side.
    fake_server.script(Step(texts=["same"], ignore_n=True), *[Step(texts=["same"], together=3)] * 3)
    # The second goes side by side from the start: its 4 requests are answered only together.
    fake_server.default = Step(texts=["same"], ignore_n=True, together=4)
    log = InMemoryCallLog()
    provider = _provider(fake_server, fast_retry, log)

    async def run() -> list[Completion]:
        async with provider:
            first = await provider.generate(LLMRequest.from_prompt("x", n=4))
            second = await provider.generate(LLMRequest.from_prompt("y", n=4))
            return first + second

    completions = asyncio.run(run())
    assert len(completions) == 8
    assert fake_server.count() == 4 + 4
    assert fake_server.most_in_flight == 4
    assert log.calls[0].attempts == 4 and log.calls[0].prompt_tokens == 40


def test_429_with_retry_after_then_success(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, waits: list[float]
) -> None:
    fake_server.script(Step(status=429, headers={"retry-after": "0.15"}), Step(texts=["fine"]))
    log = InMemoryCallLog()
    [completion] = _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert completion.text == "fine"
    # The server's Retry-After was honoured (with at most 10% of jitter on top).
    assert len(waits) == 1 and 0.15 <= waits[0] <= 0.15 * 1.1
    assert fake_server.count() == 2 and log.calls[0].attempts == 2 and log.calls[0].error is None


def test_persistent_500_gives_unavailable_after_retries(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.default = Step(status=500)
    log = InMemoryCallLog()
    with pytest.raises(LLMUnavailableError, match="HTTP 500") as caught:
        _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert isinstance(caught.value, MaxcodeError) and caught.value.kind == "server_error"
    assert fake_server.count() == 1 + fast_retry.max_retries
    [call] = log.calls
    assert call.error is not None and call.error.kind == "server_error"
    assert call.responses == [] and call.attempts == 3 and call.cost_usd == 0.0


def test_sdk_retries_are_off_ours_count(fake_server: FakeLLMServer) -> None:
    fake_server.default = Step(status=503)
    retry = RetryPolicy(max_retries=0)
    with pytest.raises(LLMUnavailableError):
        _generate(_provider(fake_server, retry, InMemoryCallLog()), LLMRequest.from_prompt("x"))
    assert fake_server.count() == 1
    assert fake_server.seen[0].headers.get("x-stainless-retry-count", "0") == "0"


def test_a_silent_server_times_out_once_and_the_request_is_not_resent(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.default = Step(delay_s=3.0)
    log = InMemoryCallLog()
    request = LLMRequest.from_prompt("x", timeout=0.3, purpose="policy:1:0")
    # Had the timeout not held, the 3 s reply would have come and no error been raised.
    with pytest.raises(LLMUnavailableError, match=r"within 0\.3 s") as caught:
        _generate(_provider(fake_server, fast_retry, log), request)
    assert caught.value.kind == "timeout"
    assert "the policy:1:0 request" in str(caught.value) and "1 attempt sent" in str(caught.value)
    assert fake_server.count() == 1
    [call] = log.calls
    assert call.error is not None and call.error.kind == "timeout"
    assert (call.attempts, call.timeouts, call.timeout_s) == (1, 1, 0.3)


def test_timeouts_are_resent_only_as_the_policy_says(fake_server: FakeLLMServer) -> None:
    fake_server.script(Step(delay_s=2.0), Step(texts=["late but fine"]))
    log = InMemoryCallLog()
    retry = RetryPolicy(timeout_retries=1, base_delay_s=0.01)
    [completion] = _generate(
        _provider(fake_server, retry, log), LLMRequest.from_prompt("x", timeout=0.3)
    )
    assert completion.text == "late but fine"
    # The record says what the answer cost: two attempts, one of them timed out.
    [call] = log.calls
    assert (call.attempts, call.timeouts, call.error) == (2, 1, None)


def test_a_streamed_answer_longer_than_the_timeout_arrives_while_pieces_come(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    # 1.5 s in all, a piece every 0.1 s: the 0.5 s timeout is a limit on silence, not in total.
    fake_server.script(Step(texts=["slow but whole"], delay_s=1.5, keepalive_s=0.1))
    log = InMemoryCallLog()
    [completion] = _generate(
        _provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x", timeout=0.5)
    )
    assert completion.text == "slow but whole" and fake_server.count() == 1
    assert fake_server.seen[0].body["stream"] is True
    assert fake_server.seen[0].body["stream_options"] == {"include_usage": True}
    assert log.calls[0].timeouts == 0 and log.calls[0].prompt_tokens == 10


def test_a_server_that_cannot_stream_is_asked_plainly(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.default = Step(texts=["plain"], no_stream=True)
    provider = _provider(fake_server, fast_retry, InMemoryCallLog())

    async def run() -> list[Completion]:
        async with provider:
            first = await provider.generate(LLMRequest.from_prompt("x"))
            return first + await provider.generate(LLMRequest.from_prompt("y"))

    assert [completion.text for completion in asyncio.run(run())] == ["plain", "plain"]
    # Streamed once (rejected), then plainly from then on.
    assert [seen.body.get("stream") for seen in fake_server.seen] == [True, None, None]


def test_finish_reason_usage_details_and_reasoning_effort(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(
        Step(
            texts=["cut"],
            finish_reason="length",
            prompt_tokens=1000,
            cached_tokens=800,
            completion_tokens=500,
            reasoning_tokens=400,
        )
    )
    log = InMemoryCallLog()
    request = LLMRequest.from_prompt("x", max_tokens=4096, reasoning_effort="high")
    [completion] = _generate(_provider(fake_server, fast_retry, log, model="o4-mini"), request)
    body = fake_server.seen[-1].body
    assert body["reasoning_effort"] == "high"
    # The answer's limit and the reasoning's room: what max_completion_tokens covers.
    assert body["max_completion_tokens"] == 4096 + REASONING_ROOM["high"]
    assert completion.finish_reason == "length"
    assert (completion.cached_prompt_tokens, completion.reasoning_tokens) == (800, 400)
    [call] = log.calls
    assert (call.cached_prompt_tokens, call.reasoning_tokens) == (800, 400)
    assert call.reasoning_effort == "high" and call.finish_reasons == ["length"]
    # o4-mini: $1.10 input, $0.275 cached input, $4.40 output per million.
    assert call.cost_usd == pytest.approx((200 * 1.10 + 800 * 0.275 + 500 * 4.40) / 1e6)


@pytest.mark.parametrize(
    "body", [b"{not json", b'{"unexpected": true}', b"<html>proxy error</html>", b""]
)
def test_malformed_reply_is_retried_then_clear_error(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, body: bytes
) -> None:
    fake_server.default = Step(raw_body=body)
    log = InMemoryCallLog()
    with pytest.raises(LLMUnavailableError) as caught:
        _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert caught.value.kind == "malformed_response"
    assert "\n" not in str(caught.value)
    assert fake_server.count() == 3


def test_malformed_then_good_reply_recovers(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(Step(raw_body=b"{broken"), Step(texts=["recovered"]))
    [completion] = _generate(
        _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
    )
    assert completion.text == "recovered"


def test_answer_without_code_is_a_normal_outcome(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(Step(texts=["I think the program is already optimal."]))
    [completion] = _generate(
        _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
    )
    assert extract_code(completion.text, "cpp") is None


@pytest.mark.parametrize("status", [401, 403])
def test_bad_key_is_a_config_error_at_once(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, status: int
) -> None:
    fake_server.default = Step(status=status)
    log = InMemoryCallLog()
    with pytest.raises(LLMConfigError, match=f"HTTP {status}") as caught:
        _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert caught.value.kind == "auth" and caught.value.exit_code == 2
    assert "OPENAI_API_KEY" in str(caught.value)
    assert fake_server.count() == 1  # never retried
    assert log.calls[0].error is not None and log.calls[0].error.kind == "auth"


def test_unknown_model_is_a_config_error(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.default = Step(status=404)
    with pytest.raises(LLMConfigError, match="not found") as caught:
        _generate(
            _provider(fake_server, fast_retry, InMemoryCallLog(), model="nope"),
            LLMRequest.from_prompt("x"),
        )
    assert caught.value.kind == "not_found" and fake_server.count() == 1


def test_rejected_request_is_a_request_error(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.default = Step(status=400)
    with pytest.raises(LLMRequestError, match="HTTP 400"):
        _generate(
            _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
        )
    # Rejected streamed, then plainly (a server that cannot stream would have answered that).
    assert fake_server.count() == 2


def test_connection_refused_is_a_quick_config_error(closed_port: int, waits: list[float]) -> None:
    log = InMemoryCallLog()
    provider = resolve_model(
        "vllm/some-model",
        base_url=f"http://127.0.0.1:{closed_port}/v1",
        call_log=log,
        retry=RetryPolicy(max_retries=5, base_delay_s=10.0),  # backoff must not apply here
    )
    with pytest.raises(LLMConfigError, match=r"cannot reach .*connection refused") as caught:
        _generate(provider, LLMRequest.from_prompt("x"))
    assert waits == [RetryPolicy().connect_delay_s] * 2  # short waits, not the 10 s backoff
    assert caught.value.kind == "unreachable"
    assert log.calls[0].attempts == 3  # the first try and two quick retries


def test_reasoning_models_get_max_completion_tokens_and_no_temperature(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    _generate(
        _provider(fake_server, fast_retry, InMemoryCallLog(), model="o4-mini"),
        LLMRequest.from_prompt("x", max_tokens=99, temperature=0.2, options={"seed": 7}),
    )
    body = fake_server.seen[-1].body
    # No effort asked: the API's default (medium), and room for its reasoning.
    assert body["max_completion_tokens"] == 99 + REASONING_ROOM["medium"]
    assert "max_tokens" not in body and "reasoning_effort" not in body
    assert "temperature" not in body
    assert body["seed"] == 7  # options go into the body


def test_concurrency_limit_per_endpoint(fake_server: FakeLLMServer) -> None:
    # Each request is answered once two are in flight: 4 requests, 2 at a time, never more.
    fake_server.default = Step(together=2)
    provider = resolve_model(
        "openai/gpt-4o-mini", base_url=fake_server.url, max_concurrency=2, retry=RetryPolicy()
    )

    async def run() -> None:
        async with provider:
            await asyncio.gather(
                *(provider.generate(LLMRequest.from_prompt("x")) for _ in range(4))
            )

    asyncio.run(run())
    assert fake_server.count() == 4
    assert fake_server.most_in_flight == 2


def test_unknown_price_gives_none_not_zero(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    log = InMemoryCallLog()
    [completion] = _generate(
        _provider(fake_server, fast_retry, log, model="my-local-model"), LLMRequest.from_prompt("x")
    )
    assert completion.prompt_tokens == 10 and completion.cost_usd is None
    assert log.calls[0].cost_usd is None and log.cost_usd is None


def test_missing_usage_is_reported_as_unknown(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(Step(usage=False))
    log = InMemoryCallLog()
    [completion] = _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert completion.prompt_tokens is None and completion.cost_usd is None
    assert log.calls[0].prompt_tokens is None


def test_unexpected_sdk_failure_is_one_clear_line(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = InMemoryCallLog()
    provider = _provider(fake_server, fast_retry, log)

    async def broken(**kwargs: object) -> object:
        raise RuntimeError("the SDK changed")

    async def run() -> None:
        async with provider:
            client = provider._client  # type: ignore[attr-defined]
            monkeypatch.setattr(client.chat.completions, "create", broken)
            await provider.generate(LLMRequest.from_prompt("x"))

    with pytest.raises(
        LLMError, match="unexpected error in the openai SDK: RuntimeError"
    ) as caught:
        asyncio.run(run())
    assert isinstance(caught.value, MaxcodeError) and caught.value.kind == "other"
    assert log.calls[0].error is not None and log.calls[0].error.kind == "other"


def test_retry_after_is_capped(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, waits: list[float]
) -> None:
    fake_server.script(Step(status=429, headers={"retry-after": "3600"}), Step(texts=["soon"]))
    [completion] = _generate(
        _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
    )
    assert completion.text == "soon"
    assert waits == [fast_retry.max_retry_after_s]  # not an hour


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0, max_retry_after_s=10.0)
    rng = random.Random(0)
    delays = [policy.backoff_s(retry, None, rng) for retry in range(6)]
    ceilings = [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len({round(d, 6) for d in delays}) == 6  # jittered, never in lockstep
    assert 3.0 <= policy.backoff_s(0, 3.0, rng) <= 3.3  # Retry-After, plus a little jitter
    assert policy.backoff_s(0, 60.0, rng) == 10.0
