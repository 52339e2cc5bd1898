"""Observations: what the policy is shown, built from the history by composable parts.

Every prompt shows the program to improve (the node being expanded), the instruction that
fits its status, and what the harness found for it (compile output, the failing test, timings,
profile): the observation is built from execution feedback under every combination of parts.
The parts add to it:

- ``feedback``: the harness's verdict on the program to improve (always shown; the name is
  kept so that configurations naming it stay valid);
- ``trajectory``: the history of the branch being refined (the ancestors of the program to
  improve, their siblings and its own earlier refinements) with their feedback, oldest first,
  trimmed to a token budget (the oldest go first; the program to improve and the best are
  never dropped);
- ``critique``: the critic's diagnosis next to every attempt shown;
- ``best``: the best program so far with its measured speedup, its feedback and how many steps
  ago it was found.

Whatever the parts, a prompt says so when earlier answers were cut at the output limit, and how
long an answer may be (``cut_note``); the critic's prompt says it of the attempt it reviews.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import jinja2

from maxcode.harness.settings import kernel_backend
from maxcode.kinds import KINDS, kind_of
from maxcode.kinds.base import kind_templates
from maxcode.search.results import interval_text
from maxcode.search.tree import Node
from maxcode.tasks import Task
from maxcode.types import Feedback

CHARS_PER_TOKEN = 4
PROGRAM_CHARS = 64_000
"""The most of one program a prompt shows (about 16k tokens); the rest is elided in the middle
with a note of what was cut (the task's own reference is shown whole)."""
FEEDBACK_CHARS = 8_000
"""The most of one feedback or critique a prompt shows."""


def bounded(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters; else its head and tail with a note
    of how many characters and lines were cut from the middle."""
    if len(text) <= limit:
        return text
    keep = max(limit - 120, 2) // 2
    cut = text[keep : len(text) - keep]
    note = (
        f"\n[... {len(cut):,} characters ({cut.count(chr(10)):,} lines) cut from the middle:"
        f" {len(text):,} in all, over the {limit:,} a prompt shows ...]\n"
    )
    return text[:keep] + note + text[len(text) - keep :]


_COMPILE_OUTPUT_IN_PROMPT = 1500


@dataclass(frozen=True)
class History:
    """What the observation is built from."""

    task: Task
    """The task."""
    parent: Node
    """The node whose program the policy is asked to improve."""
    best: Node
    """The best node so far."""
    attempts: list[Node]
    """Every proposal so far, in order."""
    trajectory_tokens: int
    """Token budget of the trajectory part."""
    parts: tuple[str, ...]
    """The parts in use (some parts change how others render)."""
    device: str = "cpu"
    """Where candidates run (KernelBench prompts ask for CPU or CUDA kernels)."""
    backend: str = ""
    """KernelBench: the kernel language asked for (cuda, triton, cpp; "": by device)."""
    step: int = 0
    """The step the prompt is for (1-based; 0 when unknown): the ``best`` part says how many
    steps ago the best was found."""
    program_chars: int = PROGRAM_CHARS
    """The most of one program the prompt shows (less when a server refused a longer one)."""


class ObservationPart(Protocol):
    """One piece of what the policy sees: template variables taken from the history."""

    name: str

    def collect(self, history: History) -> dict[str, Any]:
        """The variables this part adds to the prompt."""
        ...


def describe_feedback(feedback: Feedback | None) -> str:
    """The harness's verdict as a short text for prompts (bounded)."""
    if feedback is None:
        return "Not evaluated."
    if not feedback.compiled:
        output = feedback.compile_output.strip()
        if len(output) > _COMPILE_OUTPUT_IN_PROMPT:
            output = output[:_COMPILE_OUTPUT_IN_PROMPT] + "\n…"
        return f"Did not compile:\n{output or (feedback.error.message if feedback.error else '')}"
    lines = []
    if feedback.suspect is not None:
        claimed = (
            f" (it measured {feedback.claimed_speedup:.2f}x)" if feedback.claimed_speedup else ""
        )
        lines.append(f"{void_line(feedback.suspect)}{claimed}; no reward.")
        lines.append(
            "Its output was correct, but the speedup cannot be trusted. Earn the reward by "
            "doing less work in this process alone: no child processes left running, no "
            "state kept between runs, no extra CPUs, no reading of expected outputs."
        )
    elif not feedback.correct:
        lines.append(f"Wrong: passed {feedback.tests_passed} of {feedback.tests_total} tests.")
        if feedback.error:
            lines.append(f"First failure: {feedback.error.message}")
        others = [t for t in feedback.tests if t.status != "passed" and not t.hidden][1:6]
        if others:
            lines.append(
                "Also failing: " + ", ".join(f"test {t.index} ({t.status})" for t in others)
            )
        if any("hidden test" in flag for flag in feedback.flags):
            lines.append("A hidden test failed.")
    else:
        unit = "ms" if feedback.metric == "wall" else "instructions"
        scale = 1000.0 if feedback.metric == "wall" else 1.0
        lines.append(
            f"Correct on all {feedback.tests_total} tests; {feedback.speedup:.2f}x faster than the "
            f"reference ({feedback.metric}: {_amount(feedback.reference_cost, scale)} -> "
            f"{_amount(feedback.candidate_cost, scale)} {unit})."
        )
        noise = noise_line(feedback)
        if noise:
            lines.append(noise)
        costly = sorted(
            range(len(feedback.candidate_costs)),
            key=lambda position: feedback.candidate_costs[position],
            reverse=True,
        )[:3]
        if len(feedback.candidate_costs) > 1 and costly:
            lines.append(
                "Costliest tests: "
                + ", ".join(
                    f"test {feedback.tests[position].index} "
                    f"({_amount(feedback.reference_costs[position], scale)} -> "
                    f"{_amount(feedback.candidate_costs[position], scale)})"
                    for position in costly
                )
                + "."
            )
    if feedback.correct and feedback.cpp is not None:
        lines += feedback.cpp.describe()
    for name in ("reference", "candidate"):
        profile = feedback.profiles.get(name)
        if feedback.correct and profile is not None:
            lines.append(f"Profile of the {name}'s forward: {profile.summary(5)}.")
    if feedback.correct and feedback.kernelbench is not None:
        lines += feedback.kernelbench.describe(feedback.device, feedback.repeats)
    lines += [f"Harness flag: {flag}" for flag in feedback.flags]
    return "\n".join(lines)


def void_line(reason: str) -> str:
    """What the policy, the critic and the report read for a voided result."""
    return f"The harness voided this result: {reason}"


def _amount(value: float | None, scale: float) -> str:
    if value is None:
        return "?"
    scaled = value * scale
    return f"{scaled:,.1f}" if scale != 1.0 else f"{scaled:,.0f}"


def noise_line(feedback: Feedback) -> str:
    """How sure the speedup is, for the policy: its 95% interval, and what a gain inside the
    noise earns (empty for an exact measurement, or none)."""
    if feedback.speedup_interval is None:
        return ""
    low, high = feedback.speedup_interval
    if low == high:
        return ""
    line = f"95% confidence interval of the speedup: {low:.2f}x to {high:.2f}x"
    if feedback.repeats:
        line += f" ({feedback.repeats} paired timed rounds)"
    if low <= 1.0 <= high:
        line += "; not distinguishable from the reference (the search ranks by the low end)"
    return line + "."


def _node_view(
    node: Node, with_feedback: bool, with_critique: bool, program_chars: int = PROGRAM_CHARS
) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "is_root": node.is_root,
        "status": node.status,
        "speedup": node.speedup,
        "speedup_text": interval_text(
            node.speedup, node.feedback.speedup_interval if node.feedback else None
        ),
        "source": bounded(node.source, program_chars) if node.source is not None else None,
        "feedback": bounded(describe_feedback(node.feedback), FEEDBACK_CHARS)
        if with_feedback and node.feedback
        else "",
        "critique": bounded(node.critique, FEEDBACK_CHARS)
        if with_critique and node.critique is not None
        else None,
    }


class FeedbackPart:
    """The last result: the harness's verdict on the program to improve (always shown; see the
    module's docstring)."""

    name = "feedback"

    def collect(self, history: History) -> dict[str, Any]:
        return {"parent_feedback": True}


class CritiquePart:
    """The critic's diagnosis next to every attempt shown."""

    name = "critique"

    def collect(self, history: History) -> dict[str, Any]:
        return {"critiques": True}


class BestPart:
    """The best program so far, its measured speedup and its feedback."""

    name = "best"

    def collect(self, history: History) -> dict[str, Any]:
        best = history.best
        if best.is_root:
            return {}
        view = _node_view(best, True, "critique" in history.parts, history.program_chars)
        view["is_parent"] = best is history.parent
        view["found"] = found_when(best, history.step)
        return {"best": view}


def found_when(node: Node, step: int) -> str:
    """When a node was found, as the ``best`` part says it: ``at step 2, 1 step ago``."""
    if step <= 0 or node.step <= 0:
        return f"at step {node.step}"
    ago = max(step - node.step, 0)
    return f"at step {node.step}, {ago} step{'' if ago == 1 else 's'} ago"


def branch(parent: Node, best: Node, attempts: list[Node]) -> list[Node]:
    """The history of the branch being refined, in creation order: the ancestors of
    ``parent`` with their siblings, ``parent`` and its own earlier refinements, and ``best``
    (wherever it is). Proposals the value function kept from evaluation are left out."""
    path: list[Node] = []
    node: Node | None = parent
    while node is not None:
        path.append(node)
        node = node.parent
    members = {id(child) for ancestor in path for child in ancestor.children}
    members.update(id(ancestor) for ancestor in path)
    members.add(id(best))
    return [
        node
        for node in attempts
        if not node.is_root
        and id(node) in members
        and (node.selected or node is parent or node is best)
    ]


class TrajectoryPart:
    """The branch's earlier attempts with their feedback, oldest first, within a token
    budget."""

    name = "trajectory"

    def collect(self, history: History) -> dict[str, Any]:
        with_critique = "critique" in history.parts
        shown_elsewhere = {id(history.parent)}
        if "best" in history.parts:
            shown_elsewhere.add(id(history.best))
        entries = []
        for node in branch(history.parent, history.best, history.attempts):
            view = _node_view(node, True, with_critique, history.program_chars)
            view["summary"] = attempt_summary(node)
            if id(node) in shown_elsewhere or node.duplicate_of:
                view["source"] = None
                view["feedback"] = ""
                view["critique"] = None
                if id(node) in shown_elsewhere:
                    view["summary"] += " (shown in full below)" if node is history.parent else ""
            entries.append((node, view))
        kept, dropped = _trim(
            entries, {id(history.best), id(history.parent)}, history.trajectory_tokens
        )
        return {"trajectory": kept, "trajectory_dropped": dropped}


def attempt_summary(node: Node) -> str:
    """One line on where a node stands (for prompts and reports)."""
    if node.is_root:
        return "the reference"
    if node.source is None and node.cut_at is not None:
        return (
            f"the answer was cut off at the output limit ({node.cut_at} tokens) before its "
            "program was complete"
        )
    if node.source is None:
        return "the answer held no program"
    if node.duplicate_of:
        return f"the same program as attempt {node.duplicate_of}"
    if node.feedback is None:
        return "not evaluated"
    return node.feedback.summary()


def _trim(
    entries: list[tuple[Node, dict[str, Any]]], kept_always: set[int], budget_tokens: int
) -> tuple[list[dict[str, Any]], int]:
    """Drop the oldest attempts until the rest fit the budget; the nodes in ``kept_always``
    (by ``id``: the program to improve and the best) always stay."""
    sizes = [_size(view) for _, view in entries]
    total = sum(sizes)
    keep = [True] * len(entries)
    for position, (node, _) in enumerate(entries):
        if total <= budget_tokens * CHARS_PER_TOKEN:
            break
        if id(node) in kept_always:
            continue
        keep[position] = False
        total -= sizes[position]
    kept = [view for (_, view), wanted in zip(entries, keep) if wanted]
    return kept, keep.count(False)


def _size(view: dict[str, Any]) -> int:
    return sum(
        len(str(view.get(key) or "")) for key in ("source", "feedback", "critique", "summary")
    )


def _length_rule(limit: int) -> str:
    return f"{limit} tokens (about {limit * CHARS_PER_TOKEN:,} characters)"


def cut_note(attempts: list[Node]) -> str:
    """What the policy reads when earlier answers stopped at the output limit: which, and how
    long an answer may be (empty when none did)."""
    cut = [node for node in attempts if node.cut_at is not None]
    if not cut:
        return ""
    lost = sum(1 for node in cut if node.source is None)
    shown = ", ".join(node.node_id for node in cut[-6:])
    if len(cut) == 1:
        what = f"attempt {shown} was cut off at the output limit"
        what += " before its program was complete" if lost else " after its program"
    else:
        what = f"{len(cut)} attempts ({shown}) were cut off at the output limit"
        if lost:
            what += f", {lost} of them before their program was complete"
    if lost:
        what += " (an incomplete program is not judged: it earns nothing)"
    return (
        f"Cut answers: {what}. Your whole answer must fit in {_length_rule(cut[-1].cut_at or 0)}: "
        "a sentence or two, then the program, once."
    )


PART_TYPES: dict[str, type[ObservationPart]] = {
    part.name: part for part in (FeedbackPart, TrajectoryPart, CritiquePart, BestPart)
}


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PrefixLoader(
            {
                kind.name: jinja2.FileSystemLoader(str(folder))
                for kind in KINDS.values()
                if (folder := kind_templates(kind)).is_dir()
            }
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **variables: Any) -> str:
    """Render a prompt template: ``KIND/NAME.j2``, from that kind's ``templates`` folder."""
    return _environment().get_template(template).render(**variables).strip() + "\n"


def template_set(task: Task) -> str:
    """The folder of prompt templates for a task's kind."""
    return kind_of(task).templates


def build_policy_prompt(history: History) -> tuple[str, str]:
    """The policy's (system, user) messages for expanding ``history.parent``."""
    variables: dict[str, Any] = {"best": None, "trajectory": [], "trajectory_dropped": 0}
    flags: dict[str, Any] = {}
    for part in history.parts:
        flags.update(PART_TYPES[part]().collect(history))
    variables.update({key: value for key, value in flags.items() if key in variables})
    # The program to improve always comes with what the harness found for it.
    parent = _node_view(history.parent, True, bool(flags.get("critiques")), history.program_chars)
    if history.parent.is_root:
        parent["source"] = history.task.reference
    folder = template_set(history.task)
    system = render(
        f"{folder}/policy_system.j2",
        flags=" ".join(history.task.compile_flags),
        device=history.device,
        backend=kernel_backend(history.backend, history.device),
        tolerance="1e-4 (float32) or 1e-2 (half precision)",
    )
    user = render(
        f"{folder}/policy.j2",
        task=history.task,
        parent=parent,
        cut_note=cut_note(history.attempts),
        **variables,
    )
    return system, user


def build_critic_prompt(task: Task, node: Node) -> tuple[str, str]:
    """The critic's (system, user) messages for one evaluated node."""
    folder = template_set(task)
    system = render(f"{folder}/critic_system.j2")
    note = ""
    if node.cut_at is not None:
        note = (
            "The answer that held this program was cut off at the output limit, "
            f"{_length_rule(node.cut_at)}, after the program was complete; if its length is "
            "the problem, say how to make it shorter."
        )
    user = render(
        f"{folder}/critic.j2",
        task=task,
        node_id=node.node_id,
        source=bounded(node.source or "", PROGRAM_CHARS),
        feedback=bounded(describe_feedback(node.feedback), FEEDBACK_CHARS),
        cut_note=note,
    )
    return system, user
