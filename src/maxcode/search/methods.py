"""Search methods: how the tree grows. Each is a small strategy over the same loop.

A method picks, at each step, the nodes to expand and how many children each gets. It is a
pure function of the node list: rewards, value scores, what was evaluated and what was
expanded live on the nodes, so a replayed run (``--resume``) makes the same choices. Which
observation the policy sees is the configuration's business, not the method's: the MaxCode
variant of any method is the method with the ``trajectory,critique,best`` observation.

Only evaluated programs are ever refined or kept: a proposal the value function did not
select for evaluation (its score is a guess nobody checked) is never expanded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from maxcode.search.config import SearchConfig
from maxcode.search.tree import Node, best_node


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

    def bar(self, nodes: list[Node]) -> float | None:
        """The reward below which a new candidate cannot change what the method does next or
        what the search reports: its timing may stop once it is clearly below (None: every
        candidate is timed to the full precision)."""
        ...


def best_so_far(nodes: list[Node]) -> float:
    """The bar of a method that keeps the best program: the best reward so far (the root's
    1.0 at first). A candidate clearly below it is never the best ever seen; a candidate above
    is timed in full (``cpp._rounds_still_needed`` says why)."""
    return best_node(nodes).reward


def no_bar(nodes: list[Node]) -> None:
    """The bar of a method that ranks candidates below the best (the b kept of a beam, a
    tree's open nodes): none, every candidate timed in full."""
    return None


def measured(node: Node) -> bool:
    """The harness judged the node's program (itself, or the identical program it shares)."""
    return node.is_root or node.feedback is not None


def refinable(node: Node) -> bool:
    """A node a method may expand: the root, or an evaluated program of its own (not a copy of
    an earlier one) that the integrity policy did not void."""
    if node.is_root:
        return True
    return (
        node.source is not None
        and node.feedback is not None
        and node.duplicate_of is None
        and node.status != "suspect"
    )


def _ranked(nodes: list[Node]) -> list[Node]:
    """Highest reward first; among equals, earlier first, a suspect node (void: reward 0) after
    the others."""
    return sorted(nodes, key=lambda node: (-node.reward, node.status == "suspect"))


def _step_nodes(nodes: list[Node], step: int) -> list[Node]:
    """The evaluated proposals of one step."""
    return [node for node in nodes if node.step == step and not node.is_root and measured(node)]


def _last_step(nodes: list[Node]) -> int:
    return max(node.step for node in nodes)


class BestOfN:
    """n independent samples from the reference: one step, n children of the root."""

    name = "best-of-n"
    bar = staticmethod(best_so_far)

    def __init__(self, config: SearchConfig) -> None:
        self.samples = config.candidates

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        return [Expansion(nodes[0], self.samples)] if step == 1 else []


class EffiLearner:
    """Sequential refinement: one candidate per step from the current program, which moves to
    the best evaluated candidate of the step when that one is an improvement (with a value
    function, the one it selected; the proposals it left out were never measured)."""

    name = "effi-learner"
    bar = staticmethod(best_so_far)

    def __init__(self, config: SearchConfig) -> None:
        pass

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        return [Expansion(self.current(nodes), 1)]

    @staticmethod
    def current(nodes: list[Node]) -> Node:
        """The program being refined, replayed from the node list: the root, then at each
        step the best evaluated child of the current program when it improves on it."""
        current = nodes[0]
        for step in range(1, _last_step(nodes) + 1):
            children = [
                node
                for node in _step_nodes(nodes, step)
                if node.parent is current and node.status != "suspect"
            ]
            if children:
                challenger = _ranked(children)[0]
                if challenger.reward > current.reward:
                    current = challenger
        return current


class CudaLLM:
    """k candidates per step from the program kept at the previous step: the best of that step's
    evaluated candidates (a failed one when none is correct, so its error gets fixed)."""

    name = "cuda-llm"
    bar = staticmethod(best_so_far)

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        if step == 1:
            return [Expansion(nodes[0], self.k)]
        latest = [node for node in _step_nodes(nodes, _last_step(nodes)) if refinable(node)]
        if not latest:
            return [Expansion(nodes[0], self.k)]
        ranked = _ranked(latest)
        if ranked[0].reward > 0:
            return [Expansion(ranked[0], self.k)]
        # A failed program is refined so its error gets fixed; a compiled one first.
        compiled = [node for node in latest if node.feedback and node.feedback.compiled]
        return [Expansion((compiled or latest)[0], self.k)]


class Beam:
    """Beam search: each of the b kept nodes gets k children; the b best evaluated children
    are kept."""

    name = "beam"
    bar = staticmethod(no_bar)

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates
        self.width = config.beam_width

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        if step == 1:
            return [Expansion(nodes[0], self.k)]
        candidates = [node for node in _step_nodes(nodes, _last_step(nodes)) if refinable(node)]
        beam = [node for node in _ranked(candidates) if node.reward > 0][: self.width]
        if not beam:
            beam = _ranked(candidates)[: self.width] or [nodes[0]]
        return [Expansion(node, self.k) for node in beam]


class Tree:
    """Best-first tree search: each step expands, once, the most promising open node, ordered
    by measured reward where there is one and by the value function's prediction only for a
    node not yet measured. Open nodes are evaluated ones, so a proposal the value function
    left unmeasured is never expanded (nor a suspect one): a failed node predicted 3.0 comes
    after one measured at 4x."""

    name = "tree"
    bar = staticmethod(no_bar)

    def __init__(self, config: SearchConfig) -> None:
        self.k = config.candidates

    @staticmethod
    def priority(node: Node) -> float:
        """The measured reward; the predicted value of a node not yet measured."""
        return node.reward if measured(node) else (node.value_score or 0.0)

    def expansions(self, step: int, nodes: list[Node]) -> list[Expansion]:
        open_nodes = [node for node in nodes if not node.expanded and refinable(node)]
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
