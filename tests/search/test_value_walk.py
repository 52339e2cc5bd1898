"""effi-learner and tree with a value function that ranks badly on purpose: it loves failed
programs and prefers the slowest correct ones. The walk must still follow each method's
definition: only evaluated programs are kept or expanded, ordered by what was measured."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from maxcode.llm import LLMRequest
from maxcode.search import Node
from tests.helpers import ECHO_SUM
from tests.search.scripted import MARKER, scripted_search


class BadValue:
    """Predicts 10 for a program that will fail and 1/reward for a correct one."""

    name = "bad"

    def __init__(self) -> None:
        self.calls = 0

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        self.calls += 1
        rewards = [float(MARKER.search(source).group(2)) for source in candidates]  # type: ignore[union-attr]
        return [10.0 if reward == 0 else 1.0 / reward for reward in rewards]


def _proposer(rewards: list[float]) -> Callable[[LLMRequest], str]:
    counter = iter(range(10_000))

    def reply(request: LLMRequest) -> str:
        number = next(counter)
        reward = rewards[number % len(rewards)]
        return f"```cpp\n#pragma candidate {number} reward {reward}\n{ECHO_SUM}```"

    return reply


def _walk(tmp_path: Path, rewards: list[float], **settings: object) -> list[Node]:
    _, search = scripted_search(tmp_path, [_proposer(rewards)], **settings)
    search.value = BadValue()
    return asyncio.run(search.run()).nodes


def _parents(nodes: list[Node], step: int) -> set[str]:
    return {node.parent.node_id for node in nodes if node.step == step and node.parent}


def _only_measured_parents(nodes: list[Node]) -> None:
    for node in nodes[1:]:
        assert node.parent is not None
        assert node.parent.is_root or (node.parent.selected and node.parent.feedback is not None)


def test_effi_learner_moves_to_the_best_evaluated_child_when_it_improves(
    tmp_path: Path,
) -> None:
    # Three proposals per step, one evaluated: the value function picks the worst each time.
    rewards = [2.0, 1.5, 5.0,  4.0, 0.0, 9.0,  7.0, 2.5, 8.0,  1.0, 1.0, 1.0]  # fmt: skip
    nodes = _walk(tmp_path, rewards, method="effi-learner", depth=4, proposals=3)
    selected = [node.node_id for node in nodes if node.selected and not node.is_root]
    assert selected == ["1.1", "2.1", "3.1", "4.0"]
    # 1.1 (1.5x) improves on the reference; 2.1 failed; 3.1 (2.5x) improves on 1.1.
    assert [_parents(nodes, step) for step in (1, 2, 3, 4)] == [{"0"}, {"1.1"}, {"1.1"}, {"3.1"}]
    _only_measured_parents(nodes)
    # The unselected proposals (5x, 9x, 8x) were never measured, never refined.
    assert all(node.feedback is None for node in nodes if not node.selected)


def test_tree_orders_by_measured_reward_not_by_the_prediction(tmp_path: Path) -> None:
    # Four proposals per expansion, two evaluated: the value function keeps a failure each time.
    rewards = [0.0, 4.0, 1.5, 6.0,  3.0, 0.0, 2.0, 5.0,  1.0, 1.0, 1.0, 1.0]  # fmt: skip
    nodes = _walk(tmp_path, rewards, method="tree", depth=3, candidates=2, proposals=4)
    by_id = {node.node_id: node for node in nodes}
    assert by_id["1.0"].value_score == 10.0 and by_id["1.0"].reward == 0.0
    assert by_id["1.1"].feedback is None and by_id["1.3"].feedback is None
    # Step 2 expands 1.2 (measured 1.5x), not the failure predicted at 10 nor 1.3 (never run);
    # step 3 expands 2.2 (2.0x), not the failures 1.0 and 2.1.
    assert [_parents(nodes, step) for step in (1, 2, 3)] == [{"0"}, {"1.2"}, {"2.2"}]
    _only_measured_parents(nodes)
