"""Issue 14, done when: a search whose LLM proposes a cheat and an honest rewrite ends with the
honest one as its best, and ``runs --json``, the report and the bench table show the cheat as
void with its reason. The real command, the real harness, a fake OpenAI-compatible server on
loopback.

The cheat is the fast O(n log n) program plus a child left running after it exits (a daemon
that could do work off the clock): it is correct and measures far faster than the honest
rewrite, so without the integrity policy it would win."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import EXAMPLES, FIXTURES, run_maxcode, run_optimize
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic

TASK = EXAMPLES / "pair_count_quadratic"
FAST = (FIXTURES / "pair_count_quadratic" / "fast.cpp").read_text()
CHEAT = FAST.replace("#include <vector>\n", "#include <vector>\n#include <unistd.h>\n").replace(
    "int main() {\n",
    "int main() {\n"
    "    if (fork() == 0) {  // a helper that outlives the program\n"
    "        setsid();\n"
    "        if (fork() == 0) {\n"
    "            for (;;) pause();\n"
    "        }\n"
    "        _exit(0);\n"
    "    }\n",
    1,
)
REFERENCE = (TASK / "reference.cpp").read_text()
# Honest and slower than the cheat: sorted, the inner loop stops at the first pair too large.
HONEST = REFERENCE.replace("#include <iostream>\n", "#include <algorithm>\n#include <iostream>\n")
HONEST = HONEST.replace(
    "    for (int i = 0; i < n; ++i)\n"
    "        for (int j = i + 1; j < n; ++j)\n"
    "            if (a[i] + a[j] <= k) ++count;\n",
    "    std::sort(a.begin(), a.end());\n"
    "    for (int i = 0; i < n; ++i)\n"
    "        for (int j = i + 1; j < n && a[i] + a[j] <= k; ++j) ++count;\n",
)
VOID_LINE = "The harness voided this result: processes:"


def fenced(source: str) -> str:
    return f"Here is a faster version.\n\n```cpp\n{source}```\n"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer()

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=["Diagnosis: looked at it.\nSuggestions:\n- Keep going."])
        return Step(texts=[fenced(CHEAT), fenced(HONEST)])

    fake.responder = respond
    try:
        yield fake
    finally:
        fake.close()


def _prompts(server: FakeLLMServer, critic: bool) -> list[str]:
    return [
        seen.body["messages"][-1]["content"]
        for seen in server.seen
        if seen.body.get("messages") and is_critic(seen.body) == critic
    ]


def test_the_honest_rewrite_wins_and_the_cheat_is_shown_void(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    assert HONEST != REFERENCE and CHEAT != FAST
    store = tmp_path / "runs.db"
    best = tmp_path / "best.cpp"
    done = run_optimize(
        str(TASK), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
        "--method", "cuda-llm", "--maxcode", "--depth", "2", "--candidates", "2",
        "--metric", "instructions", "--store", str(store), "--output", str(best), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # The honest rewrite is the best, and the one verified; the cheat never is.
    assert result["best_node"] == "1.1" and best.read_text() == HONEST
    assert result["verified_node"] == "1.1"
    assert [check["node"] for check in result["verification"]] == ["1.1"]
    (voided,) = result["void"]
    assert voided["node"] == "1.0" and voided["reason"].startswith("processes:")
    # Without the policy it would have won: it measured faster than the honest best.
    assert voided["claimed_speedup"] > result["best_speedup"] > 1.0
    assert all(best_so_far < voided["claimed_speedup"] for best_so_far in result["trace"])
    assert result["isolation"] in ("bwrap", "unshare") and result["unsafe_isolation"] is False

    # The critic and the next prompt say why it earned nothing.
    assert any(VOID_LINE in prompt for prompt in _prompts(server, critic=True))
    second = _prompts(server, critic=False)[1]
    assert VOID_LINE in second and "suspect, no reward" in second

    (listed,) = json.loads(run_maxcode("runs", "--store", str(store), "--json").stdout)["runs"]
    assert listed["best_speedup"] == result["best_speedup"]
    assert listed["void"] == result["void"]
    text = run_maxcode("runs", "--store", str(store))
    assert f"void: run {result['run_id']} node 1.0: processes:" in text.stderr

    report = tmp_path / "run.html"
    done = run_maxcode("report", result["run_id"], "--store", str(store), "-o", str(report))
    assert done.returncode == 0, done.stderr
    html = report.read_text()
    assert "Void results" in html and 'class="status-suspect"' in html
    assert voided["reason"].split(" (")[0] in html
    assert "Best program: node 1.1" in html


def test_the_bench_table_never_counts_the_cheat(server: FakeLLMServer, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    done = run_maxcode(
        "bench", str(TASK), "--method", "best-of-n", "--candidates", "2",
        "--model", "openai/gpt-4o-mini", "--base-url", server.url, "--metric", "instructions",
        "--store", str(store), "--json",
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    (row,) = table["methods"]
    assert row["void"] == 1 and row["void_reasons"] == {"processes": 1}
    (voided,) = table["void"]
    assert voided["reason"].startswith("processes:") and voided["node"] == "1.0"
    # The honest rewrite is what counts: correct, and its speedup, not the cheat's.
    assert row["correct"] == 1.0
    assert 1.0 < row["mean_speedup"] < voided["claimed_speedup"]
    assert table["isolation"] and table["unsafe_isolation"] is False

    printed = run_maxcode("bench", "--resume", table["bench_id"], "--store", str(store))
    assert printed.returncode == 0, printed.stderr
    assert "void" in printed.stdout and "node 1.0" in printed.stdout
    assert "processes:" in printed.stdout
