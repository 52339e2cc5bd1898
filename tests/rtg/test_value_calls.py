"""Value-model calls (``--value rtg:provider/model``) are LLM calls like the policy's: stored,
counted, budgeted, replayed on ``--resume``. The real command and a fake server on loopback."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.helpers import ECHO_SUM, run_optimize, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step

VALUE_PROMPT = "You predict how much faster"


def test_value_calls_are_stored_counted_budgeted_and_replayed(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    seen: list[str] = []
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Step:
        prompt = body["messages"][-1]["content"]
        with lock:
            seen.append("value" if VALUE_PROMPT in prompt else "policy")
        if VALUE_PROMPT in prompt:
            return Step(texts=["2.5" if "v1 = 1" in prompt else "1.5"])
        texts = [
            f"```cpp\n{ECHO_SUM.replace('long long a, b;', f'long long a, b, v{n} = {n};')}```"
            for n in range(int(body.get("n") or 1))
        ]
        return Step(texts=texts)

    server = FakeLLMServer()
    server.responder = respond
    store = str(tmp_path / "runs.db")
    common = ["--base-url", server.url, "--store", store, "--json"]
    try:
        done = run_optimize(
            str(task), "--model", "openai/gpt-4o-mini", "--critic-model", "rules",
            "--method", "best-of-n", "--candidates", "1", "--proposals", "3",
            "--value", "rtg:openai/gpt-4o-mini", "--repeats", "1", "--max-llm-calls", "3",
            *common,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        stopped = json.loads(done.stdout)
        # One policy call and two of three value calls fit the budget of three.
        assert stopped["status"] == "stopped" and "budget" in stopped["message"].lower()
        assert stopped["llm_calls"] == 3 and stopped["evaluations"] == 0
        assert seen.count("policy") == 1 and seen.count("value") == 2
        resumed = run_optimize("--resume", stopped["run_id"], "--max-llm-calls", "10", *common)
        assert resumed.returncode == 0, resumed.stderr
        result = json.loads(resumed.stdout)
    finally:
        server.close()
    assert result["status"] == "done" and result["evaluations"] == 1
    # Replayed: the policy's answer and the value answers already stored were not asked again.
    assert seen.count("policy") == 1 and seen.count("value") == 3
    assert result["llm_calls"] == 4 and result["cost_usd"] is not None
