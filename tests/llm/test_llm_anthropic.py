"""The anthropic provider against the fake server speaking the Messages wire format."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

from maxcode.llm import (
    REASONING_ROOM,
    Completion,
    InMemoryCallLog,
    LLMConfigError,
    LLMProvider,
    LLMRequest,
    LLMUnavailableError,
    ProviderNotInstalled,
    RetryPolicy,
    resolve_model,
    stable_prefix,
)
from tests.llm.fake_llm_server import FakeLLMServer, Step

anthropic = pytest.importorskip("anthropic")


def _sdk_takes_temperature() -> bool:
    create = anthropic.resources.messages.AsyncMessages.create
    return "temperature" in inspect.signature(create).parameters


def _generate(provider: LLMProvider, request: LLMRequest) -> list[Completion]:
    async def run() -> list[Completion]:
        async with provider:
            return await provider.generate(request)

    return asyncio.run(run())


def _provider(server: FakeLLMServer, retry: RetryPolicy, log: InMemoryCallLog) -> LLMProvider:
    return resolve_model(
        "anthropic/claude-haiku-4-5", base_url=server.anthropic_url, retry=retry, call_log=log
    )


def test_normal_answer(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    fake_server.script(Step(texts=["```cpp\nint x;\n```"], prompt_tokens=200, completion_tokens=50))
    log = InMemoryCallLog()
    request = LLMRequest.from_prompt(
        "faster please", system="You optimise C++.", temperature=0.3, max_tokens=1000, stop=["##"]
    )
    [completion] = _generate(_provider(fake_server, fast_retry, log), request)
    assert completion.text == "```cpp\nint x;\n```"
    assert (completion.prompt_tokens, completion.completion_tokens) == (200, 50)
    assert completion.cost_usd == pytest.approx((200 * 1 + 50 * 5) / 1e6)
    assert completion.finish_reason == "stop"
    seen = fake_server.seen[-1]
    assert seen.path == "/v1/messages"
    assert seen.body["system"] == "You optimise C++."
    assert seen.body["messages"] == [{"role": "user", "content": "faster please"}]
    assert seen.body["max_tokens"] == 1000
    if _sdk_takes_temperature():
        assert seen.body["temperature"] == 0.3
    else:  # recent SDKs dropped sampling parameters; we follow the SDK
        assert "temperature" not in seen.body
    assert seen.body["stop_sequences"] == ["##"]
    assert log.calls[0].provider == "anthropic" and log.calls[0].error is None


def test_thinking_option_reaches_the_server_and_is_not_in_the_text(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    request = LLMRequest.from_prompt(
        "think first", max_tokens=1000, options={"thinking_budget": 2048}
    )
    [completion] = _generate(_provider(fake_server, fast_retry, InMemoryCallLog()), request)
    body = fake_server.seen[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 1000  # room for thinking and the answer
    assert "temperature" not in body  # the API accepts none with thinking on
    assert completion.text == "ok"  # the thinking block is left out


def test_reasoning_effort_gives_a_thinking_budget_apart_from_the_answer(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    request = LLMRequest.from_prompt("think", max_tokens=4096, reasoning_effort="medium")
    log = InMemoryCallLog()
    _generate(_provider(fake_server, fast_retry, log), request)
    body = fake_server.seen[-1].body
    budget = REASONING_ROOM["medium"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == 4096 + budget and body["stream"] is True
    assert log.calls[0].reasoning_effort == "medium"


def test_an_answer_cut_at_the_limit_says_length(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    fake_server.script(Step(texts=["```cpp\nint main() {"], finish_reason="length"))
    log = InMemoryCallLog()
    [completion] = _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert completion.finish_reason == "length" and log.calls[0].finish_reasons == ["length"]


def test_the_stable_prefix_is_marked_and_cached_tokens_are_priced(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    task = "# Task\n" + "the reference program, long and the same every time\n" * 40
    prompts = [task + f"## Attempt {index}\n" + "x" * 300 for index in range(2)]
    log = InMemoryCallLog()
    provider = _provider(fake_server, fast_retry, log)

    async def run() -> None:
        async with provider:
            for prompt in prompts:
                request = LLMRequest.from_prompt(
                    prompt, system="sys", cache_prefix=stable_prefix(prompt, task)
                )
                await provider.generate(request)

    asyncio.run(run())
    first = fake_server.seen[0].body
    assert first["system"] == "sys"
    [turn] = first["messages"]
    assert turn["content"][0] == {
        "type": "text",
        "text": task.rstrip(),
        "cache_control": {"type": "ephemeral"},
    }
    assert "cache_control" not in turn["content"][1]
    assert "".join(block["text"] for block in turn["content"]) == prompts[0]
    written, read = log.calls
    # The fake server counts 4 characters a token: the marked prefix, and the whole prompt.
    marked, total = len("sys" + task.rstrip()) // 4, len("sys" + prompts[0]) // 4
    assert (written.cache_write_tokens, written.cached_prompt_tokens) == (marked, 0)
    assert (read.cache_write_tokens, read.cached_prompt_tokens) == (0, marked)
    # Prompt tokens are all input, cached or not.
    assert read.prompt_tokens == written.prompt_tokens == total
    # claude-haiku-4-5: $1 input, $0.10 a cache read, $1.25 a cache write, $5 output.
    plain = total - marked
    assert written.cost_usd == pytest.approx((plain * 1 + marked * 1.25 + 5 * 5) / 1e6)
    assert read.cost_usd == pytest.approx((plain * 1 + marked * 0.10 + 5 * 5) / 1e6)


def test_invalid_thinking_budget_is_a_config_error(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    request = LLMRequest.from_prompt("x", options={"thinking_budget": 10})
    with pytest.raises(LLMConfigError, match="thinking_budget"):
        _generate(_provider(fake_server, fast_retry, InMemoryCallLog()), request)
    assert fake_server.count() == 0


def test_n_is_parallel_requests(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    log = InMemoryCallLog()
    completions = _generate(
        _provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x", n=3)
    )
    assert len(completions) == 3 and fake_server.count("/messages") == 3
    assert log.calls[0].prompt_tokens == 30 and log.calls[0].attempts == 3


def test_429_then_success(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    fake_server.script(Step(status=429, headers={"retry-after": "0"}), Step(texts=["done"]))
    log = InMemoryCallLog()
    [completion] = _generate(_provider(fake_server, fast_retry, log), LLMRequest.from_prompt("x"))
    assert completion.text == "done" and fake_server.count() == 2
    assert log.calls[0].attempts == 2


@pytest.mark.parametrize("status", [529, 500])
def test_persistent_overload_gives_unavailable(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, status: int
) -> None:
    fake_server.default = Step(status=status)
    with pytest.raises(LLMUnavailableError, match=f"HTTP {status}"):
        _generate(
            _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
        )
    assert fake_server.count() == 1 + fast_retry.max_retries


def test_bad_key(fake_server: FakeLLMServer, fast_retry: RetryPolicy) -> None:
    fake_server.default = Step(status=401)
    with pytest.raises(LLMConfigError, match="ANTHROPIC_API_KEY"):
        _generate(
            _provider(fake_server, fast_retry, InMemoryCallLog()), LLMRequest.from_prompt("x")
        )
    assert fake_server.count() == 1


def test_base_url_from_environment(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.anthropic_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    provider = resolve_model("anthropic/claude-haiku-4-5", retry=fast_retry)
    [completion] = _generate(provider, LLMRequest.from_prompt("x"))
    assert completion.text == "ok" and fake_server.count() == 1


def test_missing_key_for_the_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(LLMConfigError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic/claude-sonnet-4-5")


def test_temperature_can_be_forced_through_options(
    fake_server: FakeLLMServer, fast_retry: RetryPolicy
) -> None:
    request = LLMRequest.from_prompt("x", options={"temperature": 0.0, "top_k": 5})
    _generate(_provider(fake_server, fast_retry, InMemoryCallLog()), request)
    body = fake_server.seen[-1].body
    assert body["temperature"] == 0.0 and body["top_k"] == 5


def test_missing_sdk_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # makes ``import anthropic`` fail
    with pytest.raises(ProviderNotInstalled, match=r"pip install 'maxcode\[anthropic\]'") as caught:
        resolve_model("anthropic/claude-sonnet-4-5", base_url="http://127.0.0.1:9")
    assert caught.value.exit_code == 2
