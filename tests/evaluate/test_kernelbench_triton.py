"""Triton candidates on a CPU: Triton's interpreter judges their kernels right or wrong, a
forward that launches none of the candidate's own kernels is void, nothing is timed (no
reward: Triton kernels are timed on a GPU), and ``maxcode optimize --backend triton`` runs a
search over the real HTTP path and the real sandboxed evaluator.

The interpreter runs a kernel's programs one by one in Python: the problems run at a tenth of
their shapes (``--scale 0.1``); the fixtures give each program a block of thousands of
elements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from maxcode.errors import MaxcodeError
from maxcode.harness.integrity import category_of
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench.backends import check_backend, launch_findings
from maxcode.kinds.kernelbench.evidence import WorkerReport
from maxcode.kinds.load import load_task
from maxcode.search.observation import render
from maxcode.store import RunStore
from maxcode.types import Feedback
from tests.helpers import REPO, run_maxcode, run_optimize
from tests.llm.fake_llm_server import FakeLLMServer, Step

pytest.importorskip("torch")
pytest.importorskip("triton")

EXAMPLES = REPO / "examples" / "kernelbench"
TRITON = REPO / "tests" / "fixtures" / "kernelbench" / "triton"
SCALE = 0.1


def judge(problem: str, fixture: str) -> Feedback:
    task = load_task(str(EXAMPLES / f"{problem}.py"), scale=SCALE)
    return evaluate_task(task, (TRITON / f"{fixture}.py").read_text(), backend="triton")


def categories(feedback: Feedback) -> list[str]:
    return [category_of(flag) for flag in feedback.flags]


def assert_checked_not_timed(feedback: Feedback) -> None:
    assert feedback.correct and feedback.compiled, feedback.error
    assert feedback.kernelbench.backend == "triton" and feedback.device == "cpu"
    assert feedback.tests_passed == feedback.tests_total == 3
    assert feedback.speedup == 0.0 and feedback.candidate_cost is None
    assert feedback.kernelbench.timings == {} and feedback.speedup_interval is None
    assert "interpreted" in categories(feedback)


# 4_Softmax's fixture is judged in the search test below (one evaluation less).
@pytest.mark.parametrize("problem", ["1_ScaledGELU", "2_SumReduction"])
def test_a_triton_kernel_is_judged_correct_by_the_interpreter_and_not_timed(problem: str) -> None:
    feedback = judge(problem, problem)
    assert_checked_not_timed(feedback)
    assert feedback.suspect is None and categories(feedback) == ["interpreted"]


def test_a_wrong_triton_kernel_is_judged_wrong() -> None:
    feedback = judge("1_ScaledGELU", "wrong")
    assert feedback.compiled and not feedback.correct
    assert feedback.error is not None and feedback.error.kind == "wrong_answer"
    assert "outside tolerance" in feedback.error.message
    assert "backend" not in categories(feedback)  # its kernel did run


def test_a_forward_that_launches_no_triton_kernel_is_void() -> None:
    feedback = judge("4_Softmax", "no_launch")
    assert_checked_not_timed(feedback)  # right outputs (computed with PyTorch) ...
    assert feedback.suspect is not None  # ... but not a Triton result
    assert feedback.suspect.startswith("backend: forward launched no Triton kernel in 6 of 6")


@pytest.mark.slow
def test_the_softmax_fixture_and_launchers_replaced_by_the_candidate() -> None:
    assert_checked_not_timed(judge("4_Softmax", "4_Softmax"))
    feedback = judge("4_Softmax", "patch_counter")
    assert feedback.suspect is not None and "entry points were replaced" in feedback.suspect


def report(**triton: Any) -> WorkerReport:
    return WorkerReport(stage="ok", role="candidate", triton=triton or None)


def test_launch_counts_decide_the_backend_finding() -> None:
    counted = {"timed": None, "timed_calls": 0, "intact": True}
    assert launch_findings(report(checked=[1, 1, 2, 1, 1, 1], **counted)) == []
    silent = launch_findings(report(checked=[1, 0, 1, 1, 1, 1], **counted))
    assert silent and "in 1 of 6 checked calls" in silent[0]
    foreign = launch_findings(report(checked=[0] * 6, other=6, **counted))
    assert "6 launches of kernels it does not define" in foreign[0]
    timed = {**counted, "timed": 40, "timed_calls": 50}
    assert (
        "40 Triton launches in 50 timed calls"
        in launch_findings(report(checked=[1] * 6, **timed))[0]
    )
    replaced = launch_findings(report(checked=[1] * 6, **{**counted, "intact": False}))
    assert "replaced" in replaced[0]
    assert "no count" in launch_findings(report())[0]  # a worker that reported nothing


def test_backends_a_device_cannot_serve_are_refused_in_one_line() -> None:
    check_backend(None, "cpu")
    check_backend("triton", "cpu")
    with pytest.raises(MaxcodeError, match="needs --device cuda"):
        check_backend("cuda", "cpu")
    with pytest.raises(MaxcodeError, match="Triton candidate is checked by running it"):
        check_backend("triton", "cuda", compile_only=True)
    problem, candidate = EXAMPLES / "1_ScaledGELU.py", TRITON / "1_ScaledGELU.py"
    refused = run_maxcode("eval", str(problem), str(candidate), "--backend", "cuda")
    assert refused.returncode == 2 and "needs --device cuda" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_policy_is_asked_for_triton_kernels() -> None:
    common = {"flags": "", "tolerance": "1e-4"}
    on_cpu = render("kernelbench/policy_system.j2", device="cpu", backend="triton", **common)
    assert "@triton.jit" in on_cpu and "interpreter" in on_cpu and "load_inline" not in on_cpu
    on_gpu = render("kernelbench/policy_system.j2", device="cuda", backend="triton", **common)
    assert "@triton.jit" in on_gpu and "autotune" in on_gpu and "interpreter" not in on_gpu
    cpp = render("kernelbench/policy_system.j2", device="cpu", backend="cpp", **common)
    assert "load_inline" in cpp and "triton" not in cpp.lower()


def fenced(source: str) -> str:
    return f"Softmax in one Triton kernel.\n\n```python\n{source}```\n"


def test_optimize_with_the_triton_backend_completes_a_search_on_a_cpu(tmp_path: Path) -> None:
    softmax = (TRITON / "4_Softmax.py").read_text()
    no_launch = (TRITON / "no_launch.py").read_text()
    systems: list[str] = []
    server = FakeLLMServer()

    def respond(body: dict[str, Any]) -> Step:
        system = body["messages"][0].get("content", "")
        systems.append(system)
        if "You review one attempt" in system:
            return Step(texts=["Diagnosis: one pass over memory.\nSuggestions:\n- none"])
        return Step(texts=[fenced(softmax), fenced(no_launch)])

    server.responder = respond
    try:
        done = run_optimize(
            str(EXAMPLES / "4_Softmax.py"), "--backend", "triton", "--scale", str(SCALE),
            "--model", "openai/gpt-4o-mini", "--base-url", server.url,
            "--method", "best-of-n", "--candidates", "2", "--workers", "2",
            "--store", str(tmp_path / "runs.db"), "--output", str(tmp_path / "best.py"),
            "--json",
        )  # fmt: skip
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "done" and result["evaluations"] == 2
    assert result["best_speedup"] == 1.0  # nothing is timed on a CPU: the reference stands
    assert any("@triton.jit" in system and "interpreter" in system for system in systems)
    store = RunStore(tmp_path / "runs.db")
    record = store.get_run(result["run_id"])
    assert record is not None and record.config["backend"] == "triton"
    from maxcode.search.tree import load_tree

    by_source = {node.source: node for node in load_tree(store, result["run_id"])}
    right, void = by_source[softmax].feedback, by_source[no_launch].feedback
    assert right is not None and void is not None
    assert_checked_not_timed(right)
    assert right.suspect is None
    assert void.suspect is not None and void.suspect.startswith("backend:")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["1_ScaledGELU", "2_SumReduction", "4_Softmax"])
def test_a_triton_kernel_is_timed_on_a_gpu(problem: str) -> None:
    task = load_task(str(EXAMPLES / f"{problem}.py"))
    source = (TRITON / f"{problem}.py").read_text()
    feedback = evaluate_task(task, source, device="cuda", backend="triton")
    assert feedback.correct and feedback.compiled, feedback.error
    assert feedback.kernelbench.backend == "triton" and feedback.device == "cuda"
    assert "interpreted" not in categories(feedback)
    assert feedback.kernelbench.timings["candidate"].trials > 0  # timed, not interpreted
    assert feedback.speedup_interval is not None
    print(
        f"triton {problem}: "
        f"eager {feedback.kernelbench.timings['reference'].median_s * 1e3:.4f} ms, "
        f"candidate {feedback.kernelbench.timings['candidate'].median_s * 1e3:.4f} ms, "
        f"speedup {feedback.speedup:.2f}x {feedback.flags}"
    )


@pytest.mark.gpu
def test_a_triton_forward_that_launches_no_kernel_is_void_on_a_gpu() -> None:
    task = load_task(str(EXAMPLES / "4_Softmax.py"))
    source = (TRITON / "no_launch.py").read_text()
    feedback = evaluate_task(task, source, device="cuda", backend="triton")
    assert feedback.correct and feedback.speedup == 0.0, feedback.error
    assert feedback.suspect is not None
    assert feedback.suspect.startswith("backend: forward launched no Triton kernel")
