"""Resolving ``provider/model`` strings."""

from __future__ import annotations

import pytest

from maxcode.errors import MaxcodeError
from maxcode.llm import (
    LLMConfigError,
    OpenAIProvider,
    RulesProvider,
    ScriptedProvider,
    known_providers,
    parse_model,
    resolve_model,
)


def test_known_providers() -> None:
    assert {"openai", "anthropic", "ollama", "vllm", "rules", "scripted"} <= set(known_providers())


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(LLMConfigError) as caught:
        resolve_model("gemeni/pro")
    message = str(caught.value)
    assert isinstance(caught.value, MaxcodeError) and caught.value.exit_code == 2
    assert "'gemeni'" in message and "openai" in message and "rules" in message
    assert "\n" not in message


def test_a_bare_model_name_is_refused() -> None:
    with pytest.raises(LLMConfigError, match="unknown model provider 'gpt-4o'"):
        resolve_model("gpt-4o")
    with pytest.raises(LLMConfigError, match="names no model"):
        resolve_model("openai/")


def test_models_may_contain_slashes() -> None:
    assert parse_model("vllm/meta-llama/Llama-3.1-8B") == ("vllm", "meta-llama/Llama-3.1-8B")
    provider = resolve_model("vllm/meta-llama/Llama-3.1-8B")
    assert provider.model == "meta-llama/Llama-3.1-8B"


def test_local_servers_have_default_endpoints_and_need_no_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ollama = resolve_model("ollama/qwen2.5-coder")
    vllm = resolve_model("vllm/some-model")
    assert isinstance(ollama, OpenAIProvider) and isinstance(vllm, OpenAIProvider)
    assert ollama.base_url == "http://localhost:11434/v1" and ollama.provider_name == "ollama"
    assert vllm.base_url == "http://localhost:8000/v1" and vllm.spec == "vllm/some-model"
    assert resolve_model("ollama/x", base_url="http://gpu-box:11434/v1/").base_url == (
        "http://gpu-box:11434/v1"
    )


def test_openai_needs_a_key_for_the_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY"):
        resolve_model("openai/gpt-4o")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1")
    assert resolve_model("openai/gpt-4o").base_url == "http://127.0.0.1:1234/v1"


def test_key_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert resolve_model("openai/gpt-4o")._api_key == "sk-openai"  # type: ignore[attr-defined]
    monkeypatch.setenv("MAXCODE_API_KEY", "sk-maxcode")
    assert resolve_model("openai/gpt-4o")._api_key == "sk-maxcode"  # type: ignore[attr-defined]
    explicit = resolve_model("openai/gpt-4o", api_key="sk-explicit")
    assert explicit._api_key == "sk-explicit"  # type: ignore[attr-defined]
    monkeypatch.delenv("MAXCODE_API_KEY")
    # A local server is never sent the OpenAI key unasked.
    assert resolve_model("vllm/m")._api_key == "not-needed"  # type: ignore[attr-defined]


def test_offline_providers() -> None:
    rules = resolve_model("rules")
    assert isinstance(rules, RulesProvider) and rules.spec == "rules"
    scripted = resolve_model("scripted/demo", replies=["x"])
    assert isinstance(scripted, ScriptedProvider) and scripted.model == "demo"
    assert resolve_model("RULES").provider_name == "rules"


def test_bad_concurrency_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCODE_LLM_CONCURRENCY", "lots")
    with pytest.raises(LLMConfigError, match="MAXCODE_LLM_CONCURRENCY"):
        resolve_model("rules")
    monkeypatch.setenv("MAXCODE_LLM_CONCURRENCY", "3")
    assert resolve_model("rules").concurrency == 3
