"""The opt-in response cache."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from maxcode.home import cache_dir
from maxcode.llm import (
    Completion,
    InMemoryCallLog,
    InMemoryResponseCache,
    LLMProvider,
    LLMRequest,
    ResponseCache,
    RetryPolicy,
    SQLiteResponseCache,
    cache_key,
    resolve_model,
)
from tests.llm.fake_llm_server import FakeLLMServer, Step


def _twice(provider: LLMProvider, first: LLMRequest, second: LLMRequest) -> list[Completion]:
    async def run() -> list[Completion]:
        async with provider:
            return await provider.generate(first) + await provider.generate(second)

    return asyncio.run(run())


def _provider(server: FakeLLMServer, cache: ResponseCache, log: InMemoryCallLog) -> LLMProvider:
    return resolve_model(
        "openai/gpt-4o-mini",
        base_url=server.url,
        cache=cache,
        call_log=log,
        retry=RetryPolicy(max_retries=0),
    )


def test_identical_request_at_temperature_zero_is_served_from_cache(
    fake_server: FakeLLMServer,
) -> None:
    fake_server.script(Step(texts=["first answer"]), Step(texts=["second answer"]))
    log = InMemoryCallLog()
    cache = InMemoryResponseCache()
    request = LLMRequest.from_prompt("same prompt", temperature=0.0)
    first, second = _twice(_provider(fake_server, cache, log), request, request)
    assert fake_server.count() == 1
    assert second.text == first.text == "first answer"
    assert second.cached and not first.cached
    assert second.cost_usd == 0.0 and second.prompt_tokens == 0
    assert [call.cached for call in log.calls] == [False, True]
    assert log.calls[1].cost_usd == 0.0 and log.calls[1].responses == ["first answer"]


def test_no_caching_above_temperature_zero(fake_server: FakeLLMServer) -> None:
    fake_server.script(Step(texts=["one"]), Step(texts=["two"]))
    cache = InMemoryResponseCache()
    request = LLMRequest.from_prompt("same prompt", temperature=0.7)
    first, second = _twice(_provider(fake_server, cache, InMemoryCallLog()), request, request)
    assert (first.text, second.text) == ("one", "two")
    assert fake_server.count() == 2 and len(cache) == 0


def test_different_parameters_miss(fake_server: FakeLLMServer) -> None:
    cache = InMemoryResponseCache()
    first = LLMRequest.from_prompt("p", temperature=0.0, max_tokens=10)
    second = LLMRequest.from_prompt("p", temperature=0.0, max_tokens=20)
    _twice(_provider(fake_server, cache, InMemoryCallLog()), first, second)
    assert fake_server.count() == 2
    assert cache_key("openai", "m", first) != cache_key("openai", "m", second)
    assert cache_key("openai", "m", first) != cache_key("openai", "other", first)
    # The timeout does not change the answer: same key.
    assert cache_key("openai", "m", first) == cache_key(
        "openai", "m", first.model_copy(update={"timeout": 5.0})
    )


def test_sqlite_cache_persists_across_instances(fake_server: FakeLLMServer) -> None:
    request = LLMRequest.from_prompt("persist me", temperature=0.0)
    fake_server.script(Step(texts=["stored"]))
    cache = SQLiteResponseCache()
    _twice(_provider(fake_server, cache, InMemoryCallLog()), request, request)
    cache.close()
    reopened = SQLiteResponseCache()
    log = InMemoryCallLog()
    provider = _provider(fake_server, reopened, log)
    [completion] = asyncio.run(provider.generate(request))
    assert completion.text == "stored" and completion.cached
    assert fake_server.count() == 1
    path = reopened.path
    assert path.parent == cache_dir("llm") and path.exists()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sqlite_cache_ignores_unreadable_rows(tmp_path: Path) -> None:
    cache = SQLiteResponseCache(tmp_path / "c.sqlite3")
    with cache._connection:
        cache._connection.execute(
            "INSERT INTO responses VALUES ('k', 1, 'not json', 0)",
        )
    assert cache.get("k") is None
    assert cache.get("missing") is None
