"""The search tree: the reference at the root, every proposal a node under the one it refined."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from maxcode.errors import MaxcodeError
from maxcode.kinds import kind_named
from maxcode.kinds.load import load_task
from maxcode.llm import LLMCall
from maxcode.search.program_key import legacy_key, program_key
from maxcode.store import RunStore
from maxcode.types import Feedback

NodeStatus = Literal[
    "reference", "no_code", "cut", "compile_error", "incorrect", "correct", "suspect", "unevaluated"
]
"""``suspect``: correct output, but a void finding of the integrity policy took the reward
(``Feedback.suspect`` says which); such a node is never the best, never verified. ``cut``: the
answer stopped at the output limit before its program was complete (``Node.cut_at``)."""


@dataclass(eq=False)
class Node:
    """One program in the search and what is known about it."""

    node_id: str
    """``0`` for the root, ``<step>.<index>`` for proposals."""
    parent: Node | None
    """The node whose program the policy was refining."""
    step: int
    """The search step that proposed it (0 for the root)."""
    source: str | None
    """The program; None when the policy's answer held no code."""
    completion: str = ""
    """The policy's whole answer."""
    feedback: Feedback | None = None
    """The harness's verdict (None for the root, a node without code, or one not evaluated)."""
    critique: str | None = None
    """The critic's diagnosis and suggestions."""
    duplicate_of: str | None = None
    """An earlier node with the same program, whose evaluation this one shares."""
    children: list[Node] = field(default_factory=list)
    """Proposals made from this node."""
    expanded: bool = False
    """The policy has been asked to refine this node."""
    value_score: float | None = None
    """The value function's estimate, when one ranked the proposals."""
    selected: bool = True
    """Chosen for evaluation (the value function keeps only the top k of the proposals)."""
    cut_at: int | None = None
    """The output limit (tokens) the policy's answer stopped at (finish reason ``length``);
    None: it ended by itself. A cut answer's program is used only when it was complete."""

    @property
    def depth(self) -> int:
        """Distance from the root."""
        return 0 if self.parent is None else self.parent.depth + 1

    @property
    def is_root(self) -> bool:
        """The reference program."""
        return self.parent is None

    @property
    def reward(self) -> float:
        """What the search maximizes: the low end of the speedup's 95% interval (the speedup
        when the measurement has no interval) when correct and not suspect, 0 otherwise; the
        reference scores 1. A noisy draw of a program equal to the reference scores about 1.0
        or less, so it does not become the best by luck (``Feedback.reward``)."""
        if self.is_root:
            return 1.0
        return self.feedback.reward if self.feedback is not None else 0.0

    @property
    def speedup(self) -> float:
        """The measured speedup (the interval's estimate) when correct and not suspect, 0
        otherwise; the reference 1. For people and prompts; the search selects on ``reward``."""
        if self.is_root:
            return 1.0
        return self.feedback.speedup if self.reward > 0 and self.feedback is not None else 0.0

    @property
    def suspect(self) -> str | None:
        """The void finding that took this node's reward (None: none)."""
        return self.feedback.suspect if self.feedback is not None else None

    @property
    def status(self) -> NodeStatus:
        """Where the node stands, for prompts and reports."""
        if self.is_root:
            return "reference"
        if self.source is None:
            return "no_code" if self.cut_at is None else "cut"
        if self.feedback is None:
            return "unevaluated"
        if not self.feedback.compiled:
            return "compile_error"
        if not self.feedback.correct:
            return "incorrect"
        return "correct" if self.feedback.suspect is None else "suspect"


def best_node(nodes: list[Node]) -> Node:
    """The node with the highest reward; the earliest among equals (the root wins ties). A
    suspect node's reward is 0, so it never wins."""
    best = nodes[0]
    for node in nodes[1:]:
        if node.reward > best.reward:
            best = node
    return best


def normalised_key(source: str, language: str) -> str:
    """Identity of a program for deduplication: the same for programs that differ only in
    comments and formatting (``language``: ``cpp`` or ``python``)."""
    return program_key(source, language)


def evaluation_keys(store: RunStore, run_id: str, source: str, language: str) -> list[str]:
    """The keys a program goes by in a run, the one its evaluation is stored under first:
    today's key; but when the run was recorded before comment-blind deduplication and its
    evaluation of this program is stored under the old whitespace key, that key, then today's.
    A program is a duplicate of an earlier one with its first key (an old run's evaluations
    stay apart, as they were made); the others are for later programs (a new program equal to
    one an old run evaluated shares that evaluation)."""
    key = normalised_key(source, language)
    if store.get_evaluation(run_id, key) is None:
        old = legacy_key(source)
        if old != key and store.get_evaluation(run_id, old) is not None:
            return [old, key]
    return [key]


def limit_if_cut(finish_reason: str | None, limit: int | None) -> int | None:
    """The output limit an answer stopped at, when its ``finish_reason`` says it was cut there
    (``length``); None when it ended by itself."""
    return (limit or 0) if finish_reason == "length" else None


def answer_cut_at(call: LLMCall | None, answer: str) -> int | None:
    """The output limit an answer of ``call`` was cut at (None: not cut, or not known)."""
    if call is None or answer not in call.responses:
        return None
    return limit_if_cut(call.finish_reasons[call.responses.index(answer)], call.max_tokens)


def load_tree(store: RunStore, run_id: str) -> list[Node]:
    """A stored run's search tree, root first, with feedback and critiques."""
    record = store.get_run(run_id)
    if record is None:
        raise MaxcodeError(f"no run {run_id!r} in {store.path}")
    reference = load_task(
        record.task_spec, record.config.get("pie_tests"), record.config.get("scale", 1.0)
    ).reference
    language = kind_named(record.task_kind).language
    root = Node("0", None, 0, reference)
    nodes = {"0": root}
    first_with_key: dict[str, Node] = {}
    calls: dict[str, LLMCall | None] = {}
    for stored in store.nodes(record.run_id):
        source = store.get_candidate(stored.candidate_sha256) if stored.candidate_sha256 else None
        parent = nodes.get(stored.parent_id or "0", root)
        node = Node(stored.node_id, parent, stored.step, source, completion=stored.completion)
        if stored.prompt_call:
            if stored.prompt_call not in calls:
                calls[stored.prompt_call] = store.find_call(record.run_id, stored.prompt_call)
            node.cut_at = answer_cut_at(calls[stored.prompt_call], stored.completion)
        if source is not None:
            keys = evaluation_keys(store, record.run_id, source, language)
            original = first_with_key.get(keys[0])
            if original is None:
                node.feedback = store.get_evaluation(record.run_id, keys[0])
                for key in keys:
                    first_with_key.setdefault(key, node)
            else:
                node.duplicate_of = original.node_id
                node.feedback = original.feedback
        node.critique = store.get_critique(record.run_id, stored.node_id)
        if node.critique is None and node.duplicate_of:
            node.critique = nodes[node.duplicate_of].critique
        parent.children.append(node)
        nodes[node.node_id] = node
    return list(nodes.values())
