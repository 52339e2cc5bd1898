"""Search methods: how the tree grows. Each is a small strategy over the same loop.

A method picks, at each step, the nodes to expand and how many children each gets. Which
observation the policy sees is the configuration's business, not the method's: the MaxCode
variant of any method is the method with the ``trajectory,critique,best`` observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from maxcode.search.config import SearchConfig
from maxcode.search.tree import Node


@dataclass(frozen=True)
class Expansion:
    """One node to expand this step, and how many candidates to ask for."""

    parent: Node
    """The node whose program the policy refines."""
    count: int
    """Candidates to propose from it."""


class Method(Protocol):
    """A search method."""

    name: str

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        """What to expand at ``step`` (1-based), given every node so far (root first)."""
        ...


def _ranked(nodes: list[Node]) -> list[Node]:
    """Highest reward first; among equals, earlier first, a suspect node (void: reward 0) after
    the others."""
    return sorted(nodes, key=lambda node: (-node.reward, node.status == "suspect"))


def _latest_step(nodes: list[Node]) -> list[Node]:
    latest = max(node.step for node in nodes)
    return [node for node in nodes if node.step == latest and not node.is_root]


class BestOfN:
    """n independent samples from the reference: one step, n children of the root."""

    name = "best-of-n"

    def __init__(self, config: SearchConfig) -> None:
        self.samples = config.candidates

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        return [Expansion(nodes[0], self.samples)] if step == 1 else []


class EffiLearner:
    """Sequential refinement: one candidate per step from the current program, which moves to
    the new candidate only when that one is an improvement."""

    name = "effi-learner"

    def __init__(self, config: SearchConfig) -> None:
        self.current: Node | None = None

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        if self.current is None:
            self.current = nodes[0]
        if step > 1:
            latest = _latest_step(nodes)
            if latest and latest[-1].reward > self.current.reward:
                self.current = latest[-1]
        return [Expansion(self.current, 1)]


class CudaLLM:
    """k candidates per step from the program kept at the previous step: the best of that step's
    candidates (a failed one when none is correct, so its error gets fixed)."""

    name = "cuda-llm"

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        if step == 1:
            return [Expansion(nodes[0], self.k)]
        latest = _latest_step(nodes)
        if not latest:
            return [Expansion(nodes[0], self.k)]
        ranked = _ranked(latest)
        if ranked[0].reward > 0:
            return [Expansion(ranked[0], self.k)]
        with_code = [node for node in latest if node.source is not None and not node.duplicate_of]
        # A failed program is refined so its error gets fixed; a suspect one (voided by the
        # integrity policy) only when nothing else is left.
        compiled = [
            node
            for node in with_code
            if node.feedback and node.feedback.compiled and node.status != "suspect"
        ]
        keep = (compiled or with_code or [nodes[0]])[0]
        return [Expansion(keep, self.k)]


class Beam:
    """Beam search: each of the b kept nodes gets k children; the b best children are kept."""

    name = "beam"

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates
        self.width = config.beam_width

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        if step == 1:
            return [Expansion(nodes[0], self.k)]
        candidates = [node for node in _latest_step(nodes) if node.source is not None]
        beam = [node for node in _ranked(candidates) if node.reward > 0][: self.width]
        if not beam:
            beam = _ranked(candidates)[: self.width] or [nodes[0]]
        return [Expansion(node, self.k) for node in beam]


class Tree:
    """Best-first tree search: each step expands, once, the most promising node seen so far
    (by the value function's score when one is set, else by reward). A suspect node (voided by
    the integrity policy) is never expanded: its score was a guess the harness refuted."""

    name = "tree"

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates
        self.scores: dict[str, float] = {}

    def priority(self, node: Node) -> float:
        return self.scores.get(node.node_id, node.reward)

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        open_nodes = [
            node
            for node in nodes
            if not node.expanded
            and node.status != "suspect"
            and (node.is_root or (node.source is not None and node.duplicate_of is None))
        ]
        if not open_nodes:
            return []
        chosen = max(open_nodes, key=self.priority)  # max keeps the earliest among equals
        return [Expansion(chosen, self.k)]


def make_method(config: SearchConfig) -> Method:
    """The method a configuration names."""
    kinds: dict[str, type] = {
        "best-of-n": BestOfN,
        "effi-learner": EffiLearner,
        "cuda-llm": CudaLLM,
        "beam": Beam,
        "tree": Tree,
    }
    method: Method = kinds[config.method](config)
    return method
