"""Real models as users run them: long answers, reasoning budgets, cut answers, prompt caching.

Each test is a real search (``maxcode.optimize`` or the command line) of a bundled C++ task,
its programs really judged, its model the scripted server on 127.0.0.1 speaking OpenAI's or
Anthropic's wire format through the real SDKs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import maxcode
from maxcode.llm import REASONING_ROOM, LLMCall
from maxcode.report.html import run_report
from maxcode.search.config import SearchConfig
from maxcode.search.results import runs_json
from maxcode.search.tree import load_tree
from maxcode.store import RunStore
from tests.helpers import EXAMPLES, FIXTURES, run_optimize
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic, serving

TASK = EXAMPLES / "io_bound_sum"
REFERENCE = (TASK / "reference.cpp").read_text()
FAST = (FIXTURES / "io_bound_sum" / "fast.cpp").read_text()
MEDIUM = REFERENCE.replace("int main() {", "int main() {\n    std::ios::sync_with_stdio(false);")
CRITIQUE = "Diagnosis: output is flushed on every line.\nSuggestions:\n- Buffer the output."


def fenced(source: str) -> str:
    return f"Faster:\n\n```cpp\n{source}```\n"


def policy_bodies(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [seen.body for seen in server.seen if not is_critic(seen.body)]


def critic_bodies(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [seen.body for seen in server.seen if is_critic(seen.body)]


def user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(block["text"] for block in content)


def calls(store: Path, purpose: str) -> list[LLMCall]:
    """Every recorded call for ``purpose``, failed ones included."""
    with sqlite3.connect(store) as connection:
        rows = connection.execute(
            "SELECT call_json FROM llm_calls WHERE purpose = ? ORDER BY created_at", (purpose,)
        ).fetchall()
    return [LLMCall.model_validate_json(row[0]) for row in rows]


def answering(*policy: Step) -> Any:
    """A responder: the critic's fixed diagnosis; the policy's steps in order (the last one
    again when they run out)."""
    queue = list(policy)

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=[CRITIQUE])
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond


# --- waiting for long answers -----------------------------------------------------------------


def test_the_default_request_timeout_is_the_sdks_600_s() -> None:
    assert SearchConfig().request_timeout == 600.0
    assert SearchConfig().request_timeout > 120  # what a reasoning model writing a kernel needs


@pytest.mark.slow
def test_default_settings_wait_out_a_model_that_answers_after_150_s(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    with serving(answering(Step(texts=[fenced(FAST)], delay_s=150.0))) as server:
        summary = maxcode.optimize(
            TASK, model="openai/gpt-4o-mini", base_url=server.url, depth=1, candidates=1,
            store=store, profile=False,
        )  # fmt: skip
        assert len(policy_bodies(server)) == 1
    assert summary.status == "done" and summary.evaluations == 1 and summary.best_speedup > 1
    [call] = calls(store, "policy:1:0")
    assert (call.attempts, call.timeouts, call.timeout_s, call.error) == (1, 0, 600.0, None)


def test_a_long_streamed_answer_is_waited_for_by_silence_not_in_total(tmp_path: Path) -> None:
    # The scale of the slow test above, smaller: the answer takes 3 s in all, the timeout is
    # 1 s, the server streams a keep-alive every 0.2 s while the model "thinks".
    store = tmp_path / "runs.db"
    slow = Step(texts=[fenced(FAST)], delay_s=3.0, keepalive_s=0.2)
    with serving(answering(slow)) as server:
        summary = maxcode.optimize(
            TASK, model="openai/gpt-4o-mini", base_url=server.url, depth=1, candidates=1,
            request_timeout=1.0, store=store, verify=False, profile=False,
        )  # fmt: skip
        assert len(policy_bodies(server)) == 1
    assert summary.status == "done" and summary.evaluations == 1 and summary.best_speedup > 1
    [call] = calls(store, "policy:1:0")
    assert (call.attempts, call.timeouts, call.timeout_s) == (1, 0, 1.0)


def test_a_request_that_times_out_is_said_with_the_attempts_it_paid_for(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    with serving(answering(Step(texts=[fenced(FAST)], delay_s=5.0))) as server:
        done = run_optimize(
            str(TASK), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
            "--depth", "1", "--candidates", "1", "--request-timeout", "0.5",
            "--store", str(store),
        )  # fmt: skip
        assert server.count() == 1  # not re-sent
    assert done.returncode == 2, done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("error: ") and "Traceback" not in done.stderr
    for words in ("the policy:1:0 request", "no answer within 0.5 s", "1 attempt sent"):
        assert words in said
    [run] = RunStore(store).list_runs()
    assert run.status == "failed" and "1 attempt sent" in run.message
    [call] = calls(store, "policy:1:0")
    assert call.error is not None and call.error.kind == "timeout"
    assert (call.attempts, call.timeouts, call.timeout_s) == (1, 1, 0.5)


def test_a_run_stopped_by_a_timeout_resumes_with_a_longer_wait(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    with serving(answering(Step(texts=[fenced(FAST)], delay_s=2.0))) as server:
        first = run_optimize(
            str(TASK), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
            "--depth", "1", "--candidates", "1", "--request-timeout", "0.5",
            "--store", str(store),
        )  # fmt: skip
        assert first.returncode == 2, first.stderr
        [run] = RunStore(store).list_runs()
        again = run_optimize(
            "--resume", run.run_id, "--base-url", server.url, "--request-timeout", "30",
            "--store", str(store),
        )  # fmt: skip
    assert again.returncode == 0, again.stderr
    resumed = RunStore(store).get_run(run.run_id)
    assert resumed is not None and resumed.status == "done"
    assert resumed.config["request_timeout"] == 0.5  # the stored run keeps its own setting
    assert [call.timeout_s for call in calls(store, "policy:1:0")][-1] == 30.0


@pytest.mark.parametrize(
    ("option", "value"), [("--reasoning-effort", "extreme"), ("--request-timeout", "0")]
)
def test_bad_model_settings_are_one_line_and_exit_2(option: str, value: str) -> None:
    done = run_optimize(str(TASK), "--model", "openai/gpt-4o-mini", option, value)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and option in done.stderr


# --- reasoning models -------------------------------------------------------------------------


def test_reasoning_effort_reaches_the_openai_request_body(tmp_path: Path) -> None:
    answer = Step(texts=[fenced(FAST)], completion_tokens=900, reasoning_tokens=700)
    with serving(answering(answer)) as server:
        summary = maxcode.optimize(
            TASK, model="openai/o4-mini", base_url=server.url, depth=1, candidates=1,
            reasoning_effort="high", store=tmp_path / "runs.db", verify=False, profile=False,
        )  # fmt: skip
        [policy], [critic] = policy_bodies(server), critic_bodies(server)
    room = REASONING_ROOM["high"]
    assert policy["reasoning_effort"] == critic["reasoning_effort"] == "high"
    # The answer's limit is kept apart: max_completion_tokens leaves room for both.
    assert policy["max_completion_tokens"] == 4096 + room
    assert critic["max_completion_tokens"] == 1024 + room
    assert "max_tokens" not in policy
    # Reasoning tokens are in the run's accounting (the critic's reply reports none).
    assert summary.reasoning_tokens == 700 and summary.completion_tokens == 900 + 5


def test_reasoning_effort_reaches_the_anthropic_request_body(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    with serving(answering(Step(texts=[fenced(FAST)]))) as server:
        summary = maxcode.optimize(
            TASK, model="anthropic/claude-sonnet-4-5", base_url=server.anthropic_url,
            depth=1, candidates=1, reasoning_effort="low", max_tokens=3000,
            store=tmp_path / "runs.db", verify=False, profile=False,
        )  # fmt: skip
        [policy], [critic] = policy_bodies(server), critic_bodies(server)
    budget = REASONING_ROOM["low"]
    for body, answer in ((policy, 3000), (critic, 1024)):
        assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["max_tokens"] == answer + budget
    assert summary.status == "done" and summary.best_speedup > 1


# --- cut answers ------------------------------------------------------------------------------


def test_a_cut_answer_is_recorded_as_cut_and_the_next_prompt_says_so(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    # Step 1: a reasoning model runs out of tokens in the middle of its program (1.0), and
    # after its program, in a second block (1.1); step 2 answers in full.
    cut_inside = "I will read the input in one go.\n\n```cpp\n#include <cstdio>\nint main() {\n"
    cut_after = fenced(FAST) + "\nTo build it:\n\n```bash\ng++ -O2 fast.cpp -o"
    first = Step(texts=[cut_inside, cut_after], finish_reason="length")
    with serving(answering(first, Step(texts=[fenced(MEDIUM)]))) as server:
        summary = maxcode.optimize(
            TASK, model="openai/o4-mini", base_url=server.url, maxcode=True, depth=2,
            candidates=2, store=store, verify=False, profile=False,
        )  # fmt: skip
        prompts = [user_text(body) for body in policy_bodies(server)]
        critiques = {user_text(body).split("## Attempt ")[1][:3]: user_text(body)
                     for body in critic_bodies(server)}  # fmt: skip
    assert summary.status == "done"
    nodes = {node.node_id: node for node in load_tree(RunStore(store), summary.run_id)}
    assert nodes["1.0"].status == "cut" and nodes["1.0"].source is None
    assert nodes["1.0"].cut_at == 4096
    # The program the answer completed is used; only the block it was cut in is dropped.
    assert nodes["1.1"].source == FAST and nodes["1.1"].status == "correct"
    assert nodes["1.1"].cut_at == 4096
    # The next prompt says it plainly, and how long an answer may be.
    second = prompts[1]
    assert "Cut answers: 2 attempts (1.0, 1.1) were cut off at the output limit" in second
    assert "1 of them before their program was complete" in second
    assert "must fit in 4096 tokens (about 16,384 characters)" in second
    assert "Attempt 1.0: the answer was cut off at the output limit (4096 tokens)" in second
    assert "Cut answers" not in prompts[0]
    # So does the critic of the attempt whose answer was cut after its program.
    assert "cut off at the output limit, 4096 tokens" in critiques["1.1"]
    assert "cut off" not in critiques["2.0"]
    # The report shows the node as cut.
    report = run_report(RunStore(store), summary.run_id)
    assert "status-cut" in report and "cut off at the output limit" in report


# --- prompt caching, and the variant's name ---------------------------------------------------


def _alternating() -> Any:
    """The policy answers a new program each time (two programs, two critiques a step)."""
    programs = [
        MEDIUM,
        FAST,
        FAST.replace("out.reserve(buf.size() + 64);", "out.reserve(buf.size() + 128);"),
        MEDIUM.replace("std::endl", "'\\n'"),
    ]
    asked = [0]

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=[CRITIQUE])
        asked[0] += 1
        return Step(texts=[fenced(programs[(asked[0] - 1) % len(programs)])])

    return respond


def test_prompt_caching_marks_the_prefix_and_bills_fewer_prompt_tokens(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    store = tmp_path / "runs.db"
    search: dict[str, Any] = {
        "model": "anthropic/claude-haiku-4-5", "depth": 2, "candidates": 2, "store": store,
        "verify": False, "profile": False,
    }  # fmt: skip
    # The same two-step search of the MaxCode variant, as a bench (the cache on, by default)
    # and as a run of its own with the cache off.
    with serving(_alternating()) as server:
        table = maxcode.bench(
            [TASK], methods=["cuda-llm+maxcode"], base_url=server.anthropic_url, **search
        )
        bodies = [seen.body for seen in server.seen]
    with serving(_alternating()) as server:
        plain = maxcode.optimize(
            TASK, maxcode=True, base_url=server.anthropic_url, prompt_cache=False, **search
        )
        assert not any("cache_control" in json.dumps(seen.body) for seen in server.seen)
    # Every critic prompt, and the policy's past the first step, marks its task and reference.
    marked = [body for body in bodies if "cache_control" in json.dumps(body)]
    assert len(marked) == len(bodies) - 2  # all but the two answers of the first step
    for body in marked:
        [stable, rest] = body["messages"][0]["content"]
        assert stable["cache_control"] == {"type": "ephemeral"}
        assert stable["text"].endswith(REFERENCE.rstrip()) and "cache_control" not in rest
    # The accounting: cache reads counted and priced as such; the bench shows them.
    [row] = table["methods"]
    [cached_run] = [run for run in runs_json(RunStore(store)) if run["run_id"] != plain.run_id]
    assert cached_run["evaluations"] == plain.evaluations == 4
    assert cached_run["cached_prompt_tokens"] == row["cached_tokens"] > 0
    assert plain.cached_prompt_tokens == 0
    billed_in_full = cached_run["prompt_tokens"] - cached_run["cached_prompt_tokens"]
    assert billed_in_full < plain.prompt_tokens
    assert plain.cost_usd is not None and row["cost_usd"] < plain.cost_usd
    # Every call waited with the default timeout.
    assert {call.timeout_s for call in calls(store, "critic:1.0")} == {600.0}
    # A run of the MaxCode variant is named as the bench names it, in the runs and the report.
    labels = {run["run_id"]: run["label"] for run in runs_json(RunStore(store))}
    assert labels[plain.run_id] == "cuda-llm+maxcode"
    assert "method <b>cuda-llm+maxcode</b>" in run_report(RunStore(store), plain.run_id)
