"""The max-reward search loop.

Each step: the method picks nodes to expand; for each, the observation is built and the policy
proposes candidates; new programs are evaluated (identical ones once); the critic writes a
critique of each; everything goes into the store at once. The result is the best reward ever
seen, not a sum.

The loop is a deterministic function of the configuration and of what the store holds: LLM
answers, evaluations and critiques are looked up by a stable key before they are requested.
So ``--resume`` simply runs the loop again: completed work is replayed from the store, and
only what was missing when the run stopped is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar, cast

from maxcode.executors import EvalJob, Executor
from maxcode.kinds import kind_of
from maxcode.llm import LLMProvider, LLMRequest, LLMRequestError, stable_prefix
from maxcode.search.config import SearchConfig
from maxcode.search.critique import Critic, TemplateCritic
from maxcode.search.methods import Expansion, Method
from maxcode.search.observation import PROGRAM_CHARS, History, build_policy_prompt
from maxcode.search.results import confirms, interval_text, refutation
from maxcode.search.tree import Node, best_node, evaluation_keys, limit_if_cut
from maxcode.search.value import ValueFunction
from maxcode.store import NodeRecord, RunStore
from maxcode.tasks import Task
from maxcode.types import ErrorInfo, Feedback

MAX_CANDIDATE_CHARS = 500_000
"""A proposed program longer than this is refused before it is evaluated (no compiler or
sandbox time is spent on it); prompts show at most ``PROGRAM_CHARS`` of any program."""
MIN_PROGRAM_CHARS = 4_000
"""The least of a program a prompt shows after context refusals."""
_CONTEXT_REFUSAL = re.compile(
    r"context.{0,20}(length|window|size|limit)|too many tokens|prompt is too long"
    r"|maximum.{0,30}tokens|too long",
    re.IGNORECASE,
)


def context_refusal(error: LLMRequestError) -> bool:
    """The server refused the request for its length (HTTP 400 naming the context)."""
    return bool(_CONTEXT_REFUSAL.search(str(error)))


T = TypeVar("T")


@dataclass(frozen=True)
class StepReport:
    """Progress after one step."""

    step: int
    """The step just completed (1-based)."""
    steps: int
    """Steps planned."""
    evaluations: int
    """Evaluations so far."""
    best_speedup: float
    """Best reward so far."""
    proposed: int
    """Candidates proposed in this step."""
    llm_calls: int = 0
    """LLM calls of the run so far."""
    tokens: int = 0
    """LLM tokens of the run so far."""
    cost_usd: float | None = 0.0
    """LLM cost of the run so far (None: some price unknown)."""


VERIFY_AT_MOST = 3
"""Best programs re-verified at most, when the best ones fail (then the reference stands)."""


@dataclass(frozen=True)
class Verification:
    """The final re-verification of one program."""

    node_id: str
    """The node whose program was judged again."""
    claimed: float
    """Its reward during the search (the low end of its interval when it had one)."""
    verified: bool
    """Correct again, and surely faster than the reference (``confirms``)."""
    speedup: float
    """The speedup measured again (0 when not confirmed)."""
    message: str
    """What went wrong, when it did."""
    interval: tuple[float, float] | None = None
    """The 95% interval of the speedup measured again (None when not confirmed, or none)."""

    @classmethod
    def of(cls, node: Node, feedback: Feedback) -> Verification:
        confirmed = confirms(feedback)
        return cls(
            node_id=node.node_id,
            claimed=node.reward,
            verified=confirmed,
            speedup=feedback.speedup if confirmed else 0.0,
            message=refutation(feedback),
            interval=feedback.speedup_interval if confirmed else None,
        )


def verification_message(checked: list[Verification]) -> str:
    """What a run says about failed re-verifications (empty when the best was confirmed)."""
    failed = [check for check in checked if not check.verified]
    if not failed:
        return ""
    parts = [
        f"node {check.node_id} ({check.claimed:.2f}x) failed re-verification: {check.message}"
        for check in failed
    ]
    confirmed = next((check for check in checked if check.verified), None)
    tail = (
        f"node {confirmed.node_id} is the result "
        f"({interval_text(confirmed.speedup, confirmed.interval)} again)"
        if confirmed
        else "the reference stands"
    )
    return "; ".join(parts) + "; " + tail


@dataclass
class SearchOutcome:
    """How the loop ended."""

    status: str
    """done, or stopped (budget spent, interrupted)."""
    message: str
    """Why it stopped, when it did not simply finish."""
    best: Node
    """The best node."""
    nodes: list[Node]
    """Every node, root first."""
    evaluations: int
    """Distinct candidates evaluated."""
    trace: list[float]
    """Best reward after each step."""


def _top(scores: list[float | None], sources: list[str | None], count: int) -> set[int]:
    """Positions to evaluate: all of them without scores, else the ``count`` best scored
    programs (earlier first among equals)."""
    if all(score is None for score in scores):
        return set(range(len(scores)))
    ranked = sorted(
        (position for position, source in enumerate(sources) if source is not None),
        key=lambda position: -(scores[position] or 0.0),
    )
    return set(ranked[:count])


@dataclass(frozen=True)
class _Answers:
    """The policy's answers for one expansion."""

    texts: list[str]
    """The answers, in order."""
    cut_at: list[int | None]
    """For each answer, the output limit it was cut at (None: it ended by itself)."""
    observation: str
    """The prompt the policy saw."""


_FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*?)[ \t]*$")


def _without_open_block(text: str) -> str:
    """``text`` up to the fenced block it ends inside, if it does (a cut answer): what remains
    holds only blocks that were completed."""
    opened_at: int | None = None
    fence = ""
    lines = text.splitlines(keepends=True)
    offset = 0
    for line in lines:
        match = _FENCE_LINE.match(line.rstrip("\r\n"))
        if match is not None:
            marker, info = match.group(1), match.group(2).strip()
            if opened_at is None:
                opened_at, fence = offset, marker
            elif not info and marker[0] == fence[0] and len(marker) >= len(fence):
                opened_at = None
        offset += len(line)
    return text if opened_at is None else text[:opened_at]


async def _all(work: Iterable[Awaitable[T]]) -> list[T]:
    """Await every piece of work; when one fails, the others still finish (and are stored)
    before the first failure is raised: a spent budget must not cut calls in flight."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], results)


class StopRequested(Exception):
    """The user asked the run to stop (a first Ctrl-C): raised between pieces of work, once
    those in flight have ended and been recorded."""


@dataclass
class Search:
    """One run of the loop over a task."""

    run_id: str
    task: Task
    config: SearchConfig
    store: RunStore
    policy: LLMProvider
    critic: Critic
    executor: Executor
    method: Method
    on_step: Callable[[StepReport], None] = lambda report: None
    value: ValueFunction | None = None
    nodes: list[Node] = field(init=False)
    trace: list[float] = field(default_factory=list)
    evaluations: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    """Set to stop the run once the work in flight has ended (``stopping``)."""
    in_flight: dict[str, int] = field(default_factory=lambda: {"evaluation": 0, "model call": 0})
    """The evaluations and model calls running now."""
    _by_key: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nodes = [Node("0", None, 0, self.task.reference)]

    @property
    def language(self) -> str:
        return kind_of(self.task).language

    async def run(self) -> SearchOutcome:
        """Run (or replay and continue) the search to its end."""
        steps = self.config.steps()
        exhausted = False
        early = ""
        improved_at, best_so_far = 0, best_node(self.nodes).reward
        for step in range(1, steps + 1):
            self._stop_if_asked()
            expansions = self.method.expansions(step, self.nodes)
            if not expansions:
                break
            proposed = await self._step(step, expansions)
            exhausted = self._evaluations_exhausted()
            best = best_node(self.nodes)
            self.trace.append(best.reward)
            self.store.update_run(
                self.run_id,
                best_node_id=None if best.is_root else best.node_id,
                best_speedup=best.reward,
                steps_done=step,
                trace=self.trace,
            )
            usage = self.store.usage(self.run_id)
            self.on_step(
                StepReport(
                    step,
                    steps,
                    self.evaluations,
                    best.reward,
                    proposed,
                    usage["llm_calls"],
                    usage["prompt_tokens"] + usage["completion_tokens"],
                    usage["cost_usd"],
                )
            )
            if best.reward > best_so_far:
                improved_at, best_so_far = step, best.reward
            early = self._early_stop(step, step - improved_at, best.reward)
            if exhausted or early:
                break
        message = f"stopped after {self.evaluations} evaluations (--max-evals)" if exhausted else ""
        message = early or message
        return SearchOutcome(
            "done", message, best_node(self.nodes), self.nodes, self.evaluations, self.trace
        )

    def _early_stop(self, step: int, steps_without_gain: int, best: float) -> str:
        """Why the search stops early after ``step`` (empty: it goes on)."""
        target, patience = self.config.target, self.config.patience
        if step >= self.config.steps():
            return ""
        if target is not None and best >= target:
            return (
                f"stopped early at step {step}: the best reached {best:.2f}x (--target {target:g})"
            )
        if patience is not None and steps_without_gain >= patience:
            return (
                f"stopped early at step {step}: no better program in the last "
                f"{steps_without_gain} steps (--patience {patience})"
            )
        return ""

    def _evaluations_exhausted(self) -> bool:
        limit = self.config.max_evals
        return limit is not None and self.evaluations >= limit

    def _asked(self, expansion: Expansion) -> int:
        """Candidates to ask the policy for: k, or m > k when a value function picks k."""
        if self.value is None:
            return expansion.count
        return self.config.proposals or 2 * expansion.count

    async def _step(self, step: int, expansions: list[Expansion]) -> int:
        answers = await _all(self._propose(step, expansion) for expansion in expansions)
        # Scores of a replayed step come from the store; without a value function there are none.
        stored_scores = (
            {
                node.node_id: node.value_score
                for node in self.store.nodes(self.run_id)
                if node.step == step
            }
            if self.value is not None
            else {}
        )
        new_nodes: list[Node] = []
        for expansion, answer in zip(expansions, answers):
            expansion.parent.expanded = True
            texts = answer.texts[: self._asked(expansion)]
            sources = [
                self._extract(text, expansion.parent, cut=cut_at is not None)
                for text, cut_at in zip(texts, answer.cut_at)
            ]
            first = len(new_nodes)
            scores = await self._scores(step, first, answer.observation, sources, stored_scores)
            chosen = _top(scores, sources, expansion.count)
            for offset, text in enumerate(texts):
                node = self._add_node(
                    step, first + offset, expansion, text, sources[offset], scores[offset]
                )
                node.cut_at = answer.cut_at[offset]
                node.selected = offset in chosen
                new_nodes.append(node)
        self._stop_if_asked()
        await self._evaluate(new_nodes)
        self._stop_if_asked()
        await self._critique(new_nodes)
        return len(new_nodes)

    def _stop_if_asked(self) -> None:
        if self.stop.is_set():
            raise StopRequested

    def waiting_for(self) -> str:
        """The work in flight, in words (``3 evaluations and 1 model call``; "" for none)."""
        said = [
            f"{count} {what}{'s' if count > 1 else ''}"
            for what, count in self.in_flight.items()
            if count
        ]
        return " and ".join(said)

    @contextlib.contextmanager
    def _running(self, what: str) -> Iterator[None]:
        self.in_flight[what] += 1
        try:
            yield
        finally:
            self.in_flight[what] -= 1

    # --- proposing -----------------------------------------------------------------------

    def _extract(self, text: str, parent: Node, cut: bool = False) -> str | None:
        """The program in an answer; for a project, the bundle its file blocks or edits make
        of the parent's files (failed edits give a bundle that says why). An answer cut at the
        output limit gives only a program it completed: the block it was cut in is dropped."""
        if cut:
            text = _without_open_block(text)
        return kind_of(self.task).extract(self.task, text, parent.source or self.task.reference)

    async def _scores(
        self,
        step: int,
        first: int,
        observation: str,
        sources: list[str | None],
        stored: dict[str, float | None],
    ) -> list[float | None]:
        """Value scores of one expansion's proposals (replayed from the store when known)."""
        if self.value is None:
            return [None] * len(sources)
        ids = [f"{step}.{first + offset}" for offset in range(len(sources))]
        if all(
            stored.get(node_id) is not None or source is None
            for node_id, source in zip(ids, sources)
        ):
            return [stored.get(node_id) for node_id in ids]
        programs = [source for source in sources if source is not None]
        scored = iter(await self.value.score(observation, programs)) if programs else iter(())
        return [next(scored) if source is not None else None for source in sources]

    async def _propose(self, step: int, expansion: Expansion) -> _Answers:
        """The policy's answers for one expansion, and the observation it saw."""
        purpose = f"policy:{step}:{expansion.parent.node_id}"
        asked = self._asked(expansion)
        recorded = self.store.find_call(self.run_id, purpose)
        if recorded is not None and len(recorded.responses) >= asked:
            return _Answers(
                list(recorded.responses),
                [limit_if_cut(reason, recorded.max_tokens) for reason in recorded.finish_reasons],
                recorded.messages[-1].content,
            )
        trajectory_tokens = self.config.trajectory_tokens
        program_chars = PROGRAM_CHARS
        while True:
            history = History(
                task=self.task,
                parent=expansion.parent,
                best=best_node(self.nodes),
                attempts=self.nodes,
                trajectory_tokens=trajectory_tokens,
                parts=self.config.observation_parts(),
                device=self.config.device,
                backend=self.config.kernel_backend(),
                step=step,
                program_chars=program_chars,
            )
            try:
                return await self._ask(step, asked, purpose, history)
            except LLMRequestError as error:
                # Too long for the server's context: the trajectory goes first (halved, then
                # gone), then the programs shown are cut shorter; a prompt that is still
                # refused at the smallest ends the run.
                if not context_refusal(error) or program_chars <= MIN_PROGRAM_CHARS:
                    raise
                if trajectory_tokens > 0:
                    trajectory_tokens = trajectory_tokens // 2 if trajectory_tokens > 1000 else 0
                else:
                    program_chars = max(program_chars // 4, MIN_PROGRAM_CHARS)

    async def _ask(self, step: int, asked: int, purpose: str, history: History) -> _Answers:
        """One policy request built from ``history``."""
        system, user = build_policy_prompt(history)
        options: dict[str, object] = {}
        if self.policy.provider_name == "rules":
            # Deterministic rotation through the offline rewrites, the same on a replay.
            options["variant_offset"] = (step - 1) * asked
        request = LLMRequest.from_prompt(
            user,
            system=system,
            # The task and the reference open every prompt but the root's (which ends with
            # the reference): the prefix a provider's cache can serve again.
            cache_prefix=stable_prefix(user, self.task.reference)
            if self.config.prompt_cache
            else 0,
            n=asked,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            timeout=self.config.request_timeout,
            reasoning_effort=self.config.reasoning_effort,
            purpose=purpose,
            options=options,
        )
        with self._running("model call"):
            completions = await self.policy.generate(request)
        limit = request.max_tokens
        return _Answers(
            [completion.text for completion in completions],
            [limit_if_cut(completion.finish_reason, limit) for completion in completions],
            user,
        )

    def _add_node(
        self,
        step: int,
        index: int,
        expansion: Expansion,
        text: str,
        source: str | None,
        value_score: float | None,
    ) -> Node:
        node = Node(f"{step}.{index}", expansion.parent, step, source, completion=text)
        node.value_score = value_score
        expansion.parent.children.append(node)
        self.nodes.append(node)
        digest = self.store.put_candidate(source, self.language) if source is not None else None
        self.store.put_node(
            self.run_id,
            NodeRecord(
                node_id=node.node_id,
                parent_id=expansion.parent.node_id,
                depth=node.depth,
                step=step,
                candidate_sha256=digest,
                observation_parts=",".join(self.config.observation_parts()),
                prompt_call=f"policy:{step}:{expansion.parent.node_id}",
                completion=text,
                value_score=value_score,
            ),
        )
        return node

    # --- evaluating ----------------------------------------------------------------------

    async def _evaluate(self, new_nodes: list[Node]) -> None:
        """Evaluate the new programs, each once: a program equal to an earlier one up to
        comments and formatting shares its evaluation (``duplicate_of``)."""
        pending: dict[str, Node] = {}
        seen: dict[str, Node] = {}
        keys_of: dict[str, list[str]] = {}
        duplicates: list[tuple[Node, Node]] = []
        for node in new_nodes:
            if node.source is None or not node.selected:
                continue
            keys = evaluation_keys(self.store, self.run_id, node.source, self.language)
            first = self._by_key.get(keys[0]) or seen.get(keys[0])
            if first is not None:
                node.duplicate_of = first.node_id
                duplicates.append((node, first))
                continue
            if self._evaluations_exhausted():
                continue
            pending[keys[0]] = node
            keys_of[node.node_id] = keys
            for key in keys:
                seen.setdefault(key, node)
            self.evaluations += 1
        feedbacks = await _all(self._evaluate_one(key, node) for key, node in pending.items())
        for node, feedback in zip(pending.values(), feedbacks):
            node.feedback = feedback
            for key in keys_of[node.node_id]:
                self._by_key.setdefault(key, node)
        for node, first in duplicates:
            node.feedback = first.feedback

    def _job(self, source: str, profile: bool | None = None, reported: bool = False) -> EvalJob:
        # A screen may stop once the candidate is clearly below what the method keeps; a
        # reported number (re-verification) is timed in full.
        bar = None if reported else self.method.bar(self.nodes)
        settings = self.config.evaluation(profile)
        return EvalJob(self.task, source, settings, reported=reported, bar=bar)

    # --- the final re-verification -------------------------------------------------------

    async def verify(self) -> list[Verification]:
        """Judge the best programs again, best first, each in a fresh evaluation (new
        processes; for KernelBench, fresh seeds and inputs), until one is confirmed;
        at most ``VERIFY_AT_MOST`` are tried. Programs whose reward (the low end of their
        interval) is not above 1x are not tried: the reference then stands; nor are suspect
        ones (their reward is 0). A program whose fresh interval does not lie wholly above 1x
        confirms nothing (the next best is tried): a lucky first draw does not survive a
        second, independent one. Verdicts are stored, so a replay repeats none."""
        done = dict(self.store.verifications(self.run_id))
        order = {id(node): position for position, node in enumerate(self.nodes)}
        ranked = sorted(
            (
                node
                for node in self.nodes
                if not node.is_root
                and node.duplicate_of is None
                and node.source is not None
                and node.status != "suspect"
                and node.reward > 1.0
            ),
            key=lambda node: (-node.reward, order[id(node)]),
        )
        checked: list[Verification] = []
        for node in ranked[:VERIFY_AT_MOST]:
            assert node.source is not None
            feedback = done.get(node.node_id)
            if feedback is None:
                self._stop_if_asked()
                # Timed as a reported number: for KernelBench, rounds of fresh workers.
                job = self._job(node.source, profile=False, reported=True)
                with self._running("evaluation"):
                    feedback = await self.executor.evaluate(job)
                self.store.put_verification(self.run_id, node.node_id, feedback)
            checked.append(Verification.of(node, feedback))
            if confirms(feedback):
                break
        return checked

    async def _evaluate_one(self, key: str, node: Node) -> Feedback:
        recorded = self.store.get_evaluation(self.run_id, key)
        if recorded is not None:
            return recorded
        assert node.source is not None
        started = time.perf_counter()
        with self._running("evaluation"):
            feedback = self._oversized(node.source) or await self.executor.evaluate(
                self._job(node.source)
            )
        digest = hashlib.sha256(node.source.encode()).hexdigest()
        self.store.put_evaluation(self.run_id, key, digest, feedback, time.perf_counter() - started)
        return feedback

    def _oversized(self, source: str) -> Feedback | None:
        """The verdict on a program over ``MAX_CANDIDATE_CHARS``, given without running
        anything (None: it is evaluated as usual)."""
        if len(source) <= MAX_CANDIDATE_CHARS:
            return None
        message = (
            f"the program is {len(source):,} characters, over the limit of"
            f" {MAX_CANDIDATE_CHARS:,}: not evaluated"
        )
        return Feedback(
            task=self.task.name,
            compiled=False,
            correct=False,
            speedup=0.0,
            metric=self.config.metric,
            reference_cost=None,
            candidate_cost=None,
            tests_passed=0,
            tests_total=len(self.task.tests),
            error=ErrorInfo(kind="compile_error", message=message),
        )

    # --- critiquing ----------------------------------------------------------------------

    async def _critique(self, new_nodes: list[Node]) -> None:
        originals = [node for node in new_nodes if node.feedback and node.duplicate_of is None]
        critiques = await _all(self._critique_one(node) for node in originals)
        for node, text in zip(originals, critiques):
            node.critique = text
        by_id = {node.node_id: node for node in self.nodes}
        for node in new_nodes:
            if node.duplicate_of is not None:
                node.critique = by_id[node.duplicate_of].critique

    async def _critique_one(self, node: Node) -> str:
        recorded = self.store.get_critique(self.run_id, node.node_id)
        if recorded is not None:
            return recorded
        try:
            with self._running("model call"):
                text = await self.critic.critique(self.task, node, f"critic:{node.node_id}")
        except LLMRequestError as error:
            if not context_refusal(error):
                raise
            # Even the one bounded program is too long for this server: rules of thumb instead.
            text = await TemplateCritic().critique(self.task, node, f"critic:{node.node_id}")
        self.store.put_critique(self.run_id, node.node_id, text, self.critic.name)
        return text
