"""``maxcode llm check``, in process (click's runner) and as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from maxcode.llm.commands import llm_group
from tests.llm.fake_llm_server import FakeLLMServer, Step


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, "-m", "maxcode.llm.commands", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_check_success_in_process(fake_server: FakeLLMServer) -> None:
    fake_server.script(Step(texts=["ok"], prompt_tokens=12, completion_tokens=1))
    result = CliRunner().invoke(
        llm_group, ["check", "--model", "openai/gpt-4o-mini", "--base-url", fake_server.url]
    )
    assert result.exit_code == 0, result.output
    assert "model:    openai/gpt-4o-mini" in result.output
    assert "tokens:   12 prompt + 1 completion" in result.output
    assert "cost:     $0.000002" in result.output  # 12*0.15e-6 + 1*0.6e-6
    assert "latency:" in result.output and "'ok'" in result.output
    assert fake_server.seen[0].body["messages"][0]["content"] == "Reply with the single word: ok"


def test_check_json_via_environment(fake_server: FakeLLMServer) -> None:
    result = CliRunner().invoke(
        llm_group,
        ["check", "--json"],
        env={"MAXCODE_MODEL": "vllm/my-model", "MAXCODE_BASE_URL": fake_server.url},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "vllm/my-model" and report["endpoint"] == fake_server.url
    assert report["prompt_tokens"] == 10 and report["cost_usd"] is None
    assert report["reply"] == "ok" and report["latency_s"] >= 0


def test_check_unknown_provider_in_process() -> None:
    result = CliRunner().invoke(llm_group, ["check", "--model", "nosuch/model"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: unknown model provider 'nosuch'")
    assert result.stderr.count("\n") == 1


def test_check_subprocess_success(fake_server: FakeLLMServer) -> None:
    completed = _cli("check", "--model", "ollama/qwen", "--base-url", fake_server.url, "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["model"] == "ollama/qwen"


def test_check_subprocess_bad_key(fake_server: FakeLLMServer) -> None:
    fake_server.default = Step(status=401)
    completed = _cli("check", "--model", "openai/gpt-4o", "--base-url", fake_server.url)
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: openai/gpt-4o: the server at")
    assert "HTTP 401" in lines[0] and "Traceback" not in completed.stderr


def test_check_unknown_model_in_process(fake_server: FakeLLMServer) -> None:
    fake_server.default = Step(status=404)
    result = CliRunner().invoke(
        llm_group, ["check", "--model", "vllm/nope", "--base-url", fake_server.url]
    )
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr


def test_check_unreachable_in_process(closed_port: int) -> None:
    result = CliRunner().invoke(
        llm_group,
        ["check", "--model", "vllm/m", "--base-url", f"http://127.0.0.1:{closed_port}/v1"],
    )
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "cannot reach" in result.stderr and "connection refused" in result.stderr


def test_check_subprocess_missing_key() -> None:
    completed = _cli("check", "--model", "openai/gpt-4o")
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: openai/gpt-4o: no API key")
    assert "Traceback" not in completed.stderr
