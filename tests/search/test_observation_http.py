"""The ``--maxcode`` observation over the real path (the command, the C++ harness, a fake
OpenAI-compatible server on loopback): the program to improve always comes with what the
harness found for it, though ``feedback`` is not one of the MaxCode parts.

One chain per method (one candidate per step): the first answer does not compile, the second
is wrong, the third is correct; the prompts that refine them must carry the compiler's
message, the failing test and the timings."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ECHO_SUM, run_optimize, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step

BROKEN = ECHO_SUM.replace('printf("%lld\\n", a + b);', 'printf("%lld\\n", undeclared_total);')
WRONG = ECHO_SUM.replace("a + b);", "a + b + 1);")
CORRECT = ECHO_SUM.replace("int main() {", "// the sum, read and printed\nint main() {")
FASTER = ECHO_SUM.replace("long long a, b;", "long long a = 0, b = 0;")
ANSWERS = [BROKEN, WRONG, CORRECT, FASTER]


@pytest.mark.parametrize("method", ["cuda-llm", "beam", "tree"])
def test_maxcode_prompt_carries_the_parents_feedback(tmp_path: Path, method: str) -> None:
    assert BROKEN != ECHO_SUM and WRONG != ECHO_SUM
    task = write_task(tmp_path / "task")
    prompts: list[str] = []
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Step:
        with lock:
            prompts.append(body["messages"][-1]["content"])
            answer = ANSWERS[min(len(prompts) - 1, len(ANSWERS) - 1)]
        return Step(texts=[f"Changed it.\n\n```cpp\n{answer}```\n"])

    server = FakeLLMServer()
    server.responder = respond
    try:
        done = run_optimize(
            str(task), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
            "--critic-model", "rules", "--method", method, "--maxcode", "--depth", "4",
            "--candidates", "1", "--repeats", "1", "--no-verify",
            "--store", str(tmp_path / "runs.db"), "--json",
        )  # fmt: skip
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # A tree stops early only when no node is open (the correct one voided): say why.
    assert result["evaluations"] == 4, done.stdout[-3000:]
    assert len(prompts) == 4
    for prompt in prompts:
        # The MaxCode parts, and no `feedback` part among them.
        assert "What to do" in prompt and "Program to improve" in prompt
    after_broken, after_wrong, after_correct = prompts[1:]

    def asked(prompt: str) -> str:  # a failure shows the prompt from its instructions on
        return prompt[prompt.find("## What to do") :][:2000]

    assert "does not compile" in after_broken and "Did not compile" in after_broken, asked(
        after_broken
    )
    assert "undeclared_total" in after_broken and "error:" in after_broken
    assert "is wrong on some tests" in after_wrong, asked(after_wrong)
    assert "Wrong: passed 0 of 2 tests" in after_wrong and "First failure: test 0" in after_wrong
    assert "is correct and" in after_correct, asked(after_correct)
    assert "Correct on all 2 tests" in after_correct and " ms)" in after_correct
    # The best part: the correct program, its measured reward, when it was found (wall time:
    # it is the best only when it measured faster than the reference).
    if result["trace"][2] > 1.0:
        assert "(measured), found at step 3, 1 step ago" in after_correct
    else:
        assert "Best program so far" not in after_correct
    # The trajectory is the branch: every earlier attempt of this chain.
    assert "### Attempt 1.0:" in after_correct and "### Attempt 2.0:" in after_correct
