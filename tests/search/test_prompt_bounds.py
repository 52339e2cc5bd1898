"""Prompts that fit: a 1 MB answer is refused before it is evaluated, every program and
feedback in a prompt is bounded, and a server's context-length refusal shrinks the prompt
(trajectory first) instead of ending the run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from maxcode.search.loop import MAX_CANDIDATE_CHARS
from maxcode.search.observation import bounded
from tests.helpers import run_optimize, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step
from tests.search.test_resume import VARIANTS

HUGE = VARIANTS[1].replace("int main() {", "// " + "x" * 1_000_000 + "\nint main() {")
assert len(HUGE) > MAX_CANDIDATE_CHARS


def _server(limit: int) -> tuple[FakeLLMServer, list[int]]:
    """A server that refuses requests over ``limit`` bytes as a model with a short context
    does (HTTP 400 naming the context length); its first policy answer is 1 MB."""
    server = FakeLLMServer()
    sizes: list[int] = []
    refusal = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However,"
                " your messages resulted in 250000 tokens.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    ).encode()

    def respond(body: dict[str, Any]) -> Step:
        size = len(json.dumps(body))
        sizes.append(size)
        if size > limit:
            return Step(status=400, raw_body=refusal)
        if any("You review one attempt" in m["content"] for m in body["messages"]):
            return Step(texts=["Diagnosis: too long.\nSuggestions:\n- Remove the comment."])
        first = sum(1 for seen in server.seen if "You review" not in json.dumps(seen.body)) == 1
        program = HUGE if first else VARIANTS[2 + len(sizes) % 10]
        return Step(texts=[f"```cpp\n{program}```"] * int(body.get("n") or 1))

    server.responder = respond
    return server, sizes


def _run(tmp_path: Path, limit: int) -> tuple[dict[str, Any], list[int], Path]:
    task = write_task(tmp_path / "task", reference=VARIANTS[0], tests=[("1 2\n", "3\n")])
    store = tmp_path / "runs.db"
    server, sizes = _server(limit)
    try:
        done = run_optimize(
            str(task), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
            "--method", "cuda-llm", "--maxcode", "--depth", "3", "--candidates", "1",
            "--metric", "instructions", "--store", str(store), "--json",
        )  # fmt: skip
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), sizes, store


def test_a_1mb_answer_is_refused_and_the_run_goes_on(tmp_path: Path) -> None:
    result, sizes, store = _run(tmp_path, 400_000)
    assert result["status"] == "done"
    assert result["trace"] and len(result["trace"]) == 3
    assert max(sizes) < 400_000  # every prompt fit: the 1 MB program was shown bounded
    with sqlite3.connect(store) as db:
        verdicts = [
            json.loads(row[0]) for row in db.execute("SELECT feedback_json FROM evaluations")
        ]
    refused = [v for v in verdicts if v["error"] and "not evaluated" in v["error"]["message"]]
    assert len(refused) == 1
    assert f"over the limit of {MAX_CANDIDATE_CHARS:,}" in refused[0]["error"]["message"]
    assert refused[0]["compiled"] is False and refused[0]["speedup"] == 0.0


def test_a_context_refusal_shrinks_the_prompt(tmp_path: Path) -> None:
    # Over 40 kB is refused: a prompt showing the bounded 1 MB program (64 k characters) is
    # refused, and the run goes on with a shorter trajectory and a template critique.
    result, sizes, _ = _run(tmp_path, 40_000)
    assert result["status"] == "done", result["message"]
    assert len(result["trace"]) == 3
    assert any(size > 40_000 for size in sizes)


def test_bounded_elides_the_middle_and_says_what_was_cut() -> None:
    text = "head\n" + "line\n" * 10_000 + "tail\n"
    shown = bounded(text, 1000)
    assert len(shown) <= 1200
    assert shown.startswith("head\n") and shown.endswith("tail\n")
    assert "characters (" in shown and "cut from the middle" in shown
    assert bounded("short", 1000) == "short"
