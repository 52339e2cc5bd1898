"""Prices, budgets, the call log and the scripted provider."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from maxcode.llm import (
    LLM_CALL_SCHEMA_VERSION,
    Budget,
    BudgetExhausted,
    Completion,
    InMemoryCallLog,
    LLMConfigError,
    LLMRequest,
    LLMUnavailableError,
    ModelPrice,
    PriceTable,
    RetryPolicy,
    ScriptedProvider,
    ScriptedReply,
    resolve_model,
)
from tests.llm.fake_llm_server import FakeLLMServer, Step

# --- prices -----------------------------------------------------------------------------------


def test_known_prices_and_snapshots() -> None:
    table = PriceTable(use_environment=False)
    assert table.lookup("gpt-4o") == ModelPrice(2.50, 10.00, 1.25)
    assert table.lookup("gpt-4o-mini-2024-07-18") == ModelPrice(0.15, 0.60, 0.075)
    assert table.lookup("claude-sonnet-4-5-20250929") == ModelPrice(3.00, 15.00, 0.30, 3.75)
    assert table.lookup("claude-3-5-haiku-latest") == ModelPrice(0.80, 4.00, 0.08, 1.00)
    assert table.cost("gpt-4.1", 1_000_000, 500_000) == pytest.approx(2.00 + 4.00)


def test_cached_input_is_priced_as_such() -> None:
    sonnet = PriceTable(use_environment=False).lookup("claude-sonnet-4-5")
    assert sonnet is not None
    # 1M input of which 600k read from the cache and 100k written to it, 0 output.
    assert sonnet.cost(1_000_000, 0, 600_000, 100_000) == pytest.approx(
        0.3 * 3.00 + 0.6 * 0.30 + 0.1 * 3.75
    )
    # A price without cache prices bills cached input as input.
    assert ModelPrice(1.0, 2.0).cost(1_000_000, 0, 500_000) == pytest.approx(1.0)


def test_unknown_price_is_none_never_zero() -> None:
    table = PriceTable(use_environment=False)
    assert table.lookup("llama3.1:8b") is None
    assert table.lookup("o3-pro") is None  # a variant, not a snapshot: priced differently
    assert table.cost("llama3.1:8b", 100, 100) is None
    assert table.cost("gpt-4o", None, 100) is None  # unreported usage


def test_overrides_by_mapping_and_by_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = PriceTable({"ollama/qwen2.5-coder": {"input": 0, "output": 0}}, use_environment=False)
    assert table.cost("qwen2.5-coder", 1000, 1000, provider="ollama") == 0.0
    assert table.lookup("qwen2.5-coder") is None  # qualified by provider
    json_file = tmp_path / "prices.json"
    json_file.write_text(json.dumps({"gpt-4o": [1.0, 2.0], "my-model": {"input": 3, "output": 4}}))
    monkeypatch.setenv("MAXCODE_PRICES", str(json_file))
    table = PriceTable()
    assert table.lookup("gpt-4o") == ModelPrice(1.0, 2.0)
    assert table.lookup("my-model") == ModelPrice(3.0, 4.0)
    toml_file = tmp_path / "prices.toml"
    toml_file.write_text('["vllm/deepseek"]\ninput = 0.5\noutput = 1.5\n')
    monkeypatch.setenv("MAXCODE_PRICES", str(toml_file))
    assert PriceTable().lookup("deepseek", "vllm") == ModelPrice(0.5, 1.5)


@pytest.mark.parametrize(
    "content", ['{"gpt-4o": "cheap"}', "[1, 2]", "{not json", '{"m": {"input": -1, "output": 1}}']
)
def test_bad_price_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    monkeypatch.setenv("MAXCODE_PRICES", str(path))
    with pytest.raises(LLMConfigError) as caught:
        PriceTable()
    assert "\n" not in str(caught.value)


# --- budgets ----------------------------------------------------------------------------------


def test_budget_reserves_and_settles() -> None:
    budget = Budget(max_tokens=100, max_calls=3)
    first = budget.reserve(60, 0.0)
    with pytest.raises(BudgetExhausted, match="held by calls in flight") as caught:
        budget.reserve(50, 0.0)  # 60 held + 50 > 100
    assert caught.value.limit == "tokens"
    budget.settle(first, 20, 0.0)  # the call used less than it held
    second = budget.reserve(50, 0.0)
    assert budget.in_flight == 1 and budget.spent_tokens == 20
    budget.settle(second, 30, 0.0)
    budget.settle(second, 30, 0.0)  # settling twice counts once
    assert budget.spent_tokens == 50
    budget.reserve(10, 0.0)
    with pytest.raises(BudgetExhausted) as caught:
        budget.reserve(1, 0.0)
    assert caught.value.limit == "calls"


def test_a_run_stops_at_the_call_budget() -> None:
    log = InMemoryCallLog()
    provider = resolve_model(
        "scripted", replies=["a"], cycle=True, budget=Budget(max_calls=3), call_log=log
    )

    async def run() -> int:
        done = 0
        with pytest.raises(BudgetExhausted):
            while True:
                await provider.generate(LLMRequest.from_prompt("x"))
                done += 1
        return done

    assert asyncio.run(run()) == 3
    assert len(log.calls) == 3  # refused calls were never sent, so never logged


def test_concurrent_calls_do_not_overshoot_the_token_budget() -> None:
    # Each call may use up to 100 output tokens plus its prompt: with 1000 tokens at most 8
    # can be in flight at once (all start before any finishes), whatever they end up using.
    replies = [ScriptedReply("a", prompt_tokens=5, completion_tokens=10, delay_s=0.1)] * 50
    provider = resolve_model("scripted", replies=replies, budget=Budget(max_tokens=1000))
    request = LLMRequest.from_prompt("x", max_tokens=100)
    estimate = provider.estimate_tokens(request)
    assert 100 < estimate < 125

    async def run() -> list[list[Completion] | BaseException]:
        calls = [provider.generate(request) for _ in range(20)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(run())
    sent = [result for result in results if not isinstance(result, BaseException)]
    refused = [result for result in results if isinstance(result, BudgetExhausted)]
    assert len(sent) == 1000 // estimate
    assert len(sent) + len(refused) == 20
    assert isinstance(provider, ScriptedProvider) and len(provider.requests) == len(sent)


def test_usd_budget_counts_real_costs(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    # gpt-4o: $2.5 / $10 per million; each call costs 1000*2.5e-6 + 100*1e-5 = $0.0035.
    fake_server.default = Step(prompt_tokens=1000, completion_tokens=100)
    budget = Budget(max_usd=0.012)
    log = InMemoryCallLog()
    provider = resolve_model(
        "openai/gpt-4o", base_url=fake_server.url, budget=budget, call_log=log, retry=fast_retry
    )
    # 3000 bytes of prompt: estimated at 1024 tokens, a little above what the server bills.
    request = LLMRequest.from_prompt("x" * 3000, max_tokens=100)

    async def run() -> None:
        async with provider:
            while True:
                await provider.generate(request)

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(run())
    assert caught.value.limit == "usd"
    assert budget.spent_usd <= 0.012
    assert budget.spent_usd == pytest.approx(0.0035 * fake_server.count())
    assert fake_server.count() == 3 and log.cost_usd == pytest.approx(budget.spent_usd)


def test_usd_budget_with_unknown_price_is_refused_up_front(fake_server: FakeLLMServer) -> None:
    provider = resolve_model("vllm/local-model", base_url=fake_server.url, budget=Budget(max_usd=1))
    with pytest.raises(LLMConfigError, match="MAXCODE_PRICES"):
        asyncio.run(provider.generate(LLMRequest.from_prompt("x")))
    assert fake_server.count() == 0


def test_failed_calls_release_their_reservation() -> None:
    budget = Budget(max_calls=5, max_tokens=10_000)
    provider = resolve_model(
        "scripted",
        replies=[ScriptedReply(error="server_error")] * 10,
        budget=budget,
        retry=RetryPolicy(max_retries=1, base_delay_s=0.001),
    )
    with pytest.raises(LLMUnavailableError):
        asyncio.run(provider.generate(LLMRequest.from_prompt("x")))
    assert budget.in_flight == 0 and budget.reserved_tokens == 0 and budget.calls == 1


# --- the scripted provider and the call log ---------------------------------------------------


def test_scripted_provider_goes_through_retries_and_logs() -> None:
    log = InMemoryCallLog()
    provider = resolve_model(
        "scripted/demo",
        replies=[ScriptedReply(error="rate_limit"), ScriptedReply("hello", 7, 3)],
        call_log=log,
        retry=RetryPolicy(base_delay_s=0.001),
    )
    [completion] = asyncio.run(provider.generate(LLMRequest.from_prompt("x", purpose="policy")))
    assert completion.text == "hello" and completion.cost_usd == 0.0
    [call] = log.calls
    assert call.attempts == 2 and call.purpose == "policy" and call.model == "demo"
    assert (call.prompt_tokens, call.completion_tokens, call.cost_usd) == (7, 3, 0.0)
    assert call.schema_version == LLM_CALL_SCHEMA_VERSION and call.timestamp > 0
    assert log.prompt_tokens == 7 and log.completion_tokens == 3


def test_scripted_provider_running_out_is_a_clear_error() -> None:
    provider = resolve_model("scripted", replies=["only one"])
    asyncio.run(provider.generate(LLMRequest.from_prompt("x")))
    with pytest.raises(LLMConfigError, match="no scripted reply left"):
        asyncio.run(provider.generate(LLMRequest.from_prompt("x")))


def test_callable_replies_see_the_request() -> None:
    provider = resolve_model(
        "scripted", replies=[lambda request: request.messages[-1].content[::-1]]
    )
    [completion] = asyncio.run(provider.generate(LLMRequest.from_prompt("abc")))
    assert completion.text == "cba"
