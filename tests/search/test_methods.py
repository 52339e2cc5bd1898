"""The tree each search method grows, with scripted proposals and scripted verdicts.

The loop only talks to the executor interface; here a scripted executor reads each
candidate's reward from a marker line, so the shapes do not depend on timing noise.
The real executor is exercised end to end in test_optimize.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from maxcode.llm import LLMRequest
from maxcode.search import Node
from tests.helpers import ECHO_SUM
from tests.search.scripted import ScriptedExecutor, scripted_search


def _proposer(rewards: Callable[[int], float]) -> Callable[[LLMRequest], str]:
    counter = iter(range(10_000))

    def reply(request: LLMRequest) -> str:
        number = next(counter)
        return f"```cpp\n#pragma candidate {number} reward {rewards(number)}\n{ECHO_SUM}```"

    return reply


def grow(
    tmp_path: Path, rewards: Callable[[int], float], **settings: object
) -> tuple[list[Node], ScriptedExecutor]:
    _, search = scripted_search(tmp_path, [_proposer(rewards)], **settings)
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    return outcome.nodes, search.executor


def _parent_ids(nodes: list[Node], step: int) -> list[str]:
    return [node.parent.node_id for node in nodes if node.step == step and node.parent]


def test_best_of_n_is_n_children_of_the_root(tmp_path: Path) -> None:
    nodes, executor = grow(tmp_path, lambda n: 1.5, method="best-of-n", candidates=5, depth=4)
    assert len(nodes) == 6
    assert all(node.parent is nodes[0] for node in nodes[1:])
    assert len(executor.jobs) == 5


def test_effi_learner_is_a_chain_that_advances_only_on_improvement(tmp_path: Path) -> None:
    rewards = [2.0, 1.5, 3.0, 0.0, 4.0]
    nodes, _ = grow(tmp_path, lambda n: rewards[n], method="effi-learner", depth=5)
    proposals = nodes[1:]
    assert [node.node_id for node in proposals] == ["1.0", "2.0", "3.0", "4.0", "5.0"]
    assert [node.parent.node_id for node in proposals if node.parent] == [
        "0", "1.0", "1.0", "3.0", "3.0",
    ]  # fmt: skip


def test_cuda_llm_is_depth_levels_of_k_from_each_step_best(tmp_path: Path) -> None:
    # Rewards per candidate number: step 1 -> 0..2, step 2 -> 3..5, step 3 -> 6..8.
    rewards = [1.2, 2.5, 0.0, 0.0, 1.1, 3.0, 1.0, 1.0, 1.0]
    nodes, executor = grow(tmp_path, lambda n: rewards[n], method="cuda-llm", depth=3, candidates=3)
    assert len(nodes) == 10
    for step, parent in [(1, "0"), (2, "1.1"), (3, "2.2")]:
        level = [node for node in nodes if node.step == step]
        assert len(level) == 3
        assert {node.depth for node in level} == {step}
        assert _parent_ids(nodes, step) == [parent] * 3
    assert len(executor.jobs) == 9


def test_cuda_llm_keeps_a_failed_candidate_to_fix_when_none_is_correct(tmp_path: Path) -> None:
    nodes, _ = grow(tmp_path, lambda n: 0.0, method="cuda-llm", depth=2, candidates=2)
    assert _parent_ids(nodes, 2) == ["1.0", "1.0"]


def test_beam_keeps_the_best_b_children(tmp_path: Path) -> None:
    rewards = [1.5, 2.0, 1.1,  1.2, 0.0, 3.0, 2.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # fmt: skip
    nodes, _ = grow(
        tmp_path, lambda n: rewards[n], method="beam", depth=3, candidates=2, beam_width=2
    )
    assert _parent_ids(nodes, 1) == ["0", "0"]
    # Step 1 gave 1.0 (1.5) and 1.1 (2.0): both kept, best first, 2 children each.
    assert _parent_ids(nodes, 2) == ["1.1", "1.1", "1.0", "1.0"]
    # Step 2 gave 2.0 (1.1), 2.1 (1.2), 2.2 (0), 2.3 (3.0): 2.3 and 2.1 kept, best first.
    assert _parent_ids(nodes, 3) == ["2.3", "2.3", "2.1", "2.1"]


def test_tree_expands_the_best_open_node_each_step(tmp_path: Path) -> None:
    rewards = [1.5, 2.5, 1.2, 1.8, 3.5, 0.0, 1.0, 1.0]
    nodes, _ = grow(tmp_path, lambda n: rewards[n], method="tree", depth=4, candidates=2)
    # Step 1 expands the root; then always the highest reward not yet expanded.
    assert [_parent_ids(nodes, step)[0] for step in (1, 2, 3, 4)] == ["0", "1.1", "2.1", "3.0"]
    assert all(len(set(_parent_ids(nodes, step))) == 1 for step in (1, 2, 3, 4))


def test_identical_candidates_are_evaluated_once(tmp_path: Path) -> None:
    same = f"```cpp\n#pragma candidate 1 reward 2.0\n{ECHO_SUM}```"
    spaced = f"```cpp\n#pragma candidate   1 reward 2.0\n\n{ECHO_SUM}```"
    replies = [same, same.replace("2.0", "2.0 "), spaced]
    _, search = scripted_search(tmp_path, replies, method="best-of-n", candidates=3)
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    assert len(search.executor.jobs) == 1
    assert [node.duplicate_of for node in outcome.nodes[1:]] == [None, "1.0", "1.0"]
    assert all(node.reward == 2.0 for node in outcome.nodes[1:])


def test_max_evals_stops_the_search(tmp_path: Path) -> None:
    nodes, executor = grow(
        tmp_path, lambda n: 1.0 + n / 10, method="cuda-llm", depth=5, candidates=3, max_evals=4
    )
    assert len(executor.jobs) == 4
    assert max(node.step for node in nodes) == 2


@pytest.mark.parametrize("method", ["best-of-n", "effi-learner", "cuda-llm", "beam", "tree"])
def test_the_result_is_the_maximum_reward_seen(tmp_path: Path, method: str) -> None:
    rewards = [1.5, 4.0, 0.0, 2.0, 1.0, 3.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    nodes, _ = grow(
        tmp_path, lambda n: rewards[n % len(rewards)], method=method, depth=3, candidates=2
    )
    seen = [node.reward for node in nodes]
    assert max(seen) == max(node.reward for node in nodes if node.feedback or node.is_root)
    from maxcode.search.tree import best_node

    assert best_node(nodes).reward == max(seen)


@pytest.mark.parametrize("method", ["best-of-n", "effi-learner", "cuda-llm", "beam", "tree"])
def test_a_suspect_result_never_wins_and_is_never_refined(tmp_path: Path, method: str) -> None:
    """Every third candidate claims 50x with a void finding: it never becomes the best, and no
    method refines it while an honest program is there to refine."""
    counter = iter(range(10_000))

    def reply(request: LLMRequest) -> str:
        number = next(counter)
        if number % 3 == 0:
            marks = "#pragma void processes: a child kept running\n"
            return f"```cpp\n#pragma candidate {number} reward 50.0\n{marks}{ECHO_SUM}```"
        return f"```cpp\n#pragma candidate {number} reward {1.0 + number / 10}\n{ECHO_SUM}```"

    _, search = scripted_search(tmp_path, [reply], method=method, depth=3, candidates=3)
    outcome = asyncio.run(search.run())
    suspects = [node for node in outcome.nodes if node.status == "suspect"]
    assert suspects and all(node.reward == 0.0 for node in suspects)
    assert outcome.best.status == "correct" and outcome.best.reward < 50.0
    assert all(node.parent is None or node.parent.status != "suspect" for node in outcome.nodes)
    assert all(reward < 50.0 for reward in outcome.trace)


def test_patience_stops_a_search_that_stopped_improving(tmp_path: Path) -> None:
    rewards = [2.0, 1.5, 1.2, 1.1, 1.0, 3.0, 4.0]
    _, search = scripted_search(
        tmp_path, [_proposer(lambda n: rewards[n])], method="effi-learner", depth=7, patience=2
    )
    outcome = asyncio.run(search.run())
    assert outcome.status == "done"
    assert len(outcome.trace) == 3  # step 1 improved; steps 2 and 3 did not
    assert "stopped early at step 3" in outcome.message and "--patience 2" in outcome.message


def test_target_stops_a_search_that_reached_it(tmp_path: Path) -> None:
    rewards = [1.5, 2.5, 3.5, 4.5, 5.5]
    _, search = scripted_search(
        tmp_path, [_proposer(lambda n: rewards[n])], method="effi-learner", depth=5, target=2.5
    )
    outcome = asyncio.run(search.run())
    assert outcome.status == "done" and outcome.best.reward == 2.5
    assert len(outcome.trace) == 2
    assert "the best reached 2.50x (--target 2.5)" in outcome.message
