"""Observation parts: what the policy sees, and the trajectory's token budget."""

from __future__ import annotations

from pathlib import Path

from maxcode.kinds.load import load_task
from maxcode.search.observation import History, build_policy_prompt, describe_feedback
from maxcode.search.tree import Node
from maxcode.types import ErrorInfo, Feedback
from tests.helpers import ECHO_SUM, write_task


def _feedback(speedup: float, correct: bool = True, compiled: bool = True) -> Feedback:
    return Feedback(
        task="sum",
        compiled=compiled,
        correct=correct,
        speedup=speedup if correct else 0.0,
        metric="instructions",
        reference_cost=1000.0,
        candidate_cost=1000.0 / speedup if correct else None,
        tests_passed=2 if correct else 0,
        tests_total=2,
        error=None if correct else ErrorInfo(kind="wrong_answer", message="test 1: line 1: x"),
        compile_output="" if compiled else "candidate.cpp:3:5: error: boom",
    )


def _tree(tmp_path: Path, count: int) -> tuple[History, list[Node]]:
    task = load_task(str(write_task(tmp_path / "t")))
    root = Node("0", None, 0, task.reference)
    nodes = [root]
    for index in range(count):
        source = ECHO_SUM + f"// attempt {index} " + "x" * 400 + "\n"
        node = Node(f"1.{index}", root, 1, source, feedback=_feedback(1.0 + index / 10))
        node.critique = f"critique of attempt {index}"
        root.children.append(node)
        nodes.append(node)
    best = nodes[3]
    best.feedback = _feedback(9.0)
    history = History(task, root, best, nodes, 10_000, ("trajectory", "critique", "best"))
    return history, nodes


def test_parts_select_what_the_prompt_shows(tmp_path: Path) -> None:
    history, nodes = _tree(tmp_path, 3)
    parent = nodes[1]
    plain = History(history.task, parent, nodes[3], nodes, 10_000, ())
    _, text = build_policy_prompt(plain)
    assert "Earlier attempts" not in text and "Best program so far" not in text
    assert "critique of attempt" not in text
    # The program to improve always comes with what the harness found for it.
    assert "What the harness found for it" in text and "Correct on all 2 tests" in text
    assert "// attempt 0" in _last_code_block(text)

    every = ("feedback", "trajectory", "critique", "best")
    full = History(history.task, parent, nodes[3], nodes, 10_000, every)
    _, text = build_policy_prompt(full)
    assert "Best program so far: 9.00x faster than the reference (measured)" in text
    assert "Earlier attempts on this branch, oldest first" in text
    assert "critique of attempt 1" in text
    assert "What the harness found for it" in text
    # The program to improve is the last code block (the offline proposer relies on it).
    assert text.rstrip().endswith("```")
    assert (
        text.rsplit("```cpp", 1)[1].strip().startswith("#include")
        and "// attempt 0" in text.rsplit("```cpp", 1)[1]
    )


def _last_code_block(text: str) -> str:
    assert text.rstrip().endswith("```")
    return text.rstrip().removesuffix("```").rsplit("```cpp", 1)[1]


def test_trajectory_drops_oldest_first_and_never_the_best(tmp_path: Path) -> None:
    history, nodes = _tree(tmp_path, 12)
    tight = History(history.task, nodes[0], nodes[3], nodes, 600, ("trajectory",))
    _, text = build_policy_prompt(tight)
    assert "older attempts left out" in text
    assert "### Attempt 1.2:" in text  # the best (9x), kept though it is old
    assert "### Attempt 1.0:" not in text and "### Attempt 1.1:" not in text
    assert "### Attempt 1.11:" in text  # the newest stay
    roomy = History(history.task, nodes[0], nodes[3], nodes, 100_000, ("trajectory",))
    _, text = build_policy_prompt(roomy)
    assert all(f"### Attempt 1.{index}:" in text for index in range(12))


def test_instruction_follows_the_status_of_the_program_to_improve(tmp_path: Path) -> None:
    history, nodes = _tree(tmp_path, 3)
    broken = Node("2.0", nodes[1], 2, ECHO_SUM, feedback=_feedback(0, False, compiled=False))
    wrong = Node("2.1", nodes[1], 2, ECHO_SUM, feedback=_feedback(0, correct=False))
    cases = {
        nodes[0]: "Write a faster version",
        broken: "does not compile. Fix the compile error",
        wrong: "is wrong on some tests",
        nodes[1]: "is correct and 1.00x faster",
    }
    for parent, words in cases.items():
        _, text = build_policy_prompt(
            History(history.task, parent, nodes[0], nodes, 1000, ("feedback",))
        )
        assert words in text


def test_feedback_text_is_bounded_and_informative() -> None:
    huge = _feedback(0, False, compiled=False).model_copy(update={"compile_output": "e" * 50_000})
    assert len(describe_feedback(huge)) < 2000
    assert "Did not compile" in describe_feedback(huge)
    assert "Wrong: passed 0 of 2 tests" in describe_feedback(_feedback(0, correct=False))
    assert "2.00x faster" in describe_feedback(_feedback(2.0))


def test_a_voided_result_says_why_to_the_policy_and_the_critic(tmp_path: Path) -> None:
    import asyncio

    from maxcode.harness.integrity import apply_policy
    from maxcode.search.critique import TemplateCritic
    from maxcode.search.observation import build_critic_prompt

    reason = "processes: the candidate left processes running after it exited (killed)"
    voided = apply_policy(_feedback(4.0).model_copy(update={"flags": [reason]}))
    assert voided.suspect == reason and voided.speedup == 0.0
    history, nodes = _tree(tmp_path, 3)
    cheat = Node("2.0", nodes[1], 2, ECHO_SUM, feedback=voided)
    assert cheat.status == "suspect" and cheat.reward == 0.0
    text = describe_feedback(voided)
    assert f"the harness voided this result: {reason}" in text.lower()
    assert "4.00x" in text  # what it measured, and that it earned nothing
    _, prompt = build_policy_prompt(
        History(history.task, cheat, nodes[0], [*nodes, cheat], 10_000, ("feedback",))
    )
    assert "The harness voided the result of the program below" in prompt
    assert reason in prompt
    _, critic_prompt = build_critic_prompt(history.task, cheat)
    assert reason in critic_prompt
    critique = asyncio.run(TemplateCritic().critique(history.task, cheat, "critic:2.0"))
    assert critique.startswith(f"Diagnosis: The harness voided this result: {reason}")


def test_every_combination_of_parts_shows_the_parents_feedback(tmp_path: Path) -> None:
    history, nodes = _tree(tmp_path, 3)
    broken = Node("2.0", nodes[1], 2, ECHO_SUM, feedback=_feedback(0, False, compiled=False))
    nodes[1].children.append(broken)
    every = ("feedback", "trajectory", "critique", "best")
    for mask in range(16):
        parts = tuple(part for bit, part in enumerate(every) if mask & (1 << bit))
        _, text = build_policy_prompt(
            History(history.task, broken, nodes[3], [*nodes, broken], 10_000, parts, step=3)
        )
        assert "candidate.cpp:3:5: error: boom" in text, parts
        assert "What the harness found for it" in text, parts


def test_best_says_its_measured_reward_and_how_long_ago(tmp_path: Path) -> None:
    history, nodes = _tree(tmp_path, 3)
    best = nodes[3]
    _, text = build_policy_prompt(
        History(history.task, nodes[1], best, nodes, 10_000, ("best",), step=4)
    )
    assert "9.00x faster than the reference (measured), found at step 1, 3 steps ago" in text


def test_trajectory_is_the_branch_and_keeps_parent_and_best(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "t")))
    root = Node("0", None, 0, task.reference)
    nodes = [root]

    def add(node_id: str, parent: Node, speedup: float) -> Node:
        node = Node(node_id, parent, int(node_id.split(".")[0]), ECHO_SUM + f"// {node_id}\n")
        node.feedback = _feedback(speedup)
        parent.children.append(node)
        nodes.append(node)
        return node

    a, b = add("1.0", root, 1.5), add("1.1", root, 5.0)  # b: the best, on another branch
    a_kids = [add("2.0", a, 1.6), add("2.1", a, 1.2)]
    b_kids = [add("2.2", b, 1.1), add("2.3", b, 1.3)]
    parent = a_kids[0]
    earlier = add("3.0", parent, 0.5)  # an earlier refinement of the parent itself
    _, text = build_policy_prompt(History(task, parent, b, nodes, 100_000, ("trajectory",), step=4))
    shown = {line.split(":")[0].removeprefix("### Attempt ") for line in text.splitlines()
             if line.startswith("### Attempt ")}  # fmt: skip
    assert shown == {"1.0", "1.1", "2.0", "2.1", "3.0"}
    assert all(kid.node_id not in shown for kid in b_kids) and earlier.node_id in shown
    # A tight budget drops the oldest, never the parent nor the best.
    _, text = build_policy_prompt(History(task, parent, b, nodes, 1, ("trajectory",), step=4))
    assert "### Attempt 2.0:" in text and "### Attempt 1.1:" in text
    assert "### Attempt 1.0:" not in text and "### Attempt 3.0:" not in text
