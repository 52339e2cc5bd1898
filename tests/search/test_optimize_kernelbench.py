"""``maxcode optimize`` on a KernelBench problem: the real command and sandboxed evaluator, a fake
OpenAI-compatible server on 127.0.0.1 as the policy and critic, and the offline rules proposer."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, ROW_BY_ROW, SUITE_ROUNDS, run_optimize, write_problem
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic

pytest.importorskip("torch")

CHEATS = REPO / "tests" / "fixtures" / "kernelbench" / "cheats"
PROBLEM = CHEATS / "problem.py"
HONEST = (CHEATS / "honest.py").read_text()
ZEROS = (CHEATS / "zeros.py").read_text()
CRITIC_MARK = "critic-says-4c1d"


def fenced(source: str) -> str:
    return f"Fused the epilogue.\n\n```python\n{source}```\n"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer()

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=[f"Diagnosis: {CRITIC_MARK} two passes over memory.\n"
                               "Suggestions:\n- Fuse tanh and the scale."])  # fmt: skip
        return Step(texts=[fenced(ZEROS), fenced(HONEST)], prompt_tokens=700)

    fake.responder = respond
    try:
        yield fake
    finally:
        fake.close()


optimize = run_optimize


def test_optimize_a_kernelbench_problem_with_an_llm(server: FakeLLMServer, tmp_path: Path) -> None:
    best = tmp_path / "best.py"
    problem = tmp_path / "1_RowByRow.py"
    problem.write_text(ROW_BY_ROW)
    done = optimize(
        str(problem), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
        "--method", "cuda-llm", "--observation", "feedback,trajectory,critique,best",
        "--depth", "2", "--candidates", "2", "--profile",
        "--store", str(tmp_path / "runs.db"), "--output", str(best), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "done"
    assert result["evaluations"] == 2  # the zeros cheat and the honest program, each once
    assert result["best_speedup"] > 1.5
    # The verdicts say why when the honest rewrite was not the result.
    assert best.read_text() == HONEST, result["verification"]
    # Judged again with fresh seeds and inputs before it was reported.
    assert result["verified_node"] == result["best_node"]
    assert result["verified_speedup"] > 1.5
    assert result["verification"][0]["verified"] is True
    # ... over fresh worker pairs: a bias of one pair of processes is not a result (as many
    # as the suite's MAXCODE_MOST_ROUNDS allows).
    assert result["verification"][0]["rounds"] == SUITE_ROUNDS

    prompts = [
        seen.body["messages"]
        for seen in server.seen
        if seen.body.get("messages") and not is_critic(seen.body)
    ]
    system, first = prompts[0][0]["content"], prompts[0][-1]["content"]
    assert "ModelNew" in system and "one CPU core" in system and "load_inline" in system
    assert "```python" in first and "for row in x" in first
    second = prompts[1][-1]["content"]
    assert CRITIC_MARK in second
    # The zeros cheat's verdict and the honest program's timings reach the next prompt.
    assert "values outside tolerance" in second
    assert "Per call on cpu" in second and "eager" in second
    # Where the candidate's time goes (an operator, or its own extension's code: which one
    # leads depends on the machine's timing).
    assert "Profile of the candidate's forward: " in second


def test_optimize_a_problem_offline_with_the_rules_proposer(tmp_path: Path) -> None:
    # The rules' rewrite compiles the forward with torch.compile. A forward that is one matrix
    # product goes to aten's own kernel, with no C++ of inductor's to build in the sandbox:
    # about 20 s less than a bundled problem's fused softmax, for the same path.
    problem = write_problem(tmp_path, "return x @ x.T", inputs="[torch.randn(256, 256)]")
    done = optimize(
        str(problem),
        "--depth", "1", "--candidates", "1", "--repeats", "10", "--no-profile",
        "--store", str(tmp_path / "runs.db"), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "offline rules proposer" in done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "done" and result["evaluations"] == 1
    with sqlite3.connect(tmp_path / "runs.db") as db:
        stored = [json.loads(row[0]) for row in db.execute("SELECT feedback_json FROM evaluations")]
    # The rewrite's verdict is kept, timed with exactly the calls --repeats asked for.
    correct = [feedback for feedback in stored if feedback["correct"]]
    assert correct and all(
        feedback["kernelbench"]["timings"]["candidate"]["trials"] == 10 for feedback in correct
    )
    best = Path(result["best_program"])
    assert best.suffix == ".py" and "class Model" in best.read_text()
    # Whatever the rewrite gained on this machine, it was measured: a correct program or the
    # reference (1.0), never a failed one.
    assert result["best_speedup"] > 0 and len(result["trace"]) == 1


def test_cuda_on_a_machine_without_a_gpu_fails_before_any_llm_call(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = optimize(
        str(PROBLEM), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
        "--device", "cuda", "--store", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "no CUDA GPU" in done.stderr and "Traceback" not in done.stderr
    assert server.seen == []
