"""The critic: turns what the harness measured into a diagnosis and concrete suggestions."""

from __future__ import annotations

from typing import Protocol

from maxcode.llm import LLMProvider, LLMRequest
from maxcode.search.observation import build_critic_prompt, void_line
from maxcode.search.tree import Node
from maxcode.tasks import Task
from maxcode.types import Feedback


class Critic(Protocol):
    """Writes a critique of one evaluated node."""

    name: str
    """What wrote the critiques (stored with them)."""

    async def critique(self, task: Task, node: Node, purpose: str) -> str:
        """The diagnosis and suggestions for ``node`` (``purpose`` keys the LLM call)."""
        ...


class LLMCritic:
    """A critic backed by a language model."""

    def __init__(self, provider: LLMProvider, max_tokens: int = 1024) -> None:
        self.provider = provider
        self.max_tokens = max_tokens
        self.name = provider.spec

    async def critique(self, task: Task, node: Node, purpose: str) -> str:
        system, user = build_critic_prompt(task, node)
        request = LLMRequest.from_prompt(
            user, system=system, temperature=0.2, max_tokens=self.max_tokens, purpose=purpose
        )
        completions = await self.provider.generate(request)
        return completions[0].text.strip() if completions else ""


class TemplateCritic:
    """The critic that goes with the offline ``rules`` proposer: rules of thumb read off the
    feedback, no model."""

    name = "template"

    async def critique(self, task: Task, node: Node, purpose: str) -> str:
        feedback = node.feedback
        if node.source is None:
            return (
                "Diagnosis: the answer held no program.\n"
                "Suggestions:\n- Answer with the complete program in one fenced code block."
            )
        if feedback is None:
            return "Diagnosis: not evaluated."
        if not feedback.compiled:
            first = feedback.error.message if feedback.error else "compilation failed"
            return (
                f"Diagnosis: the program does not compile: {first}\n"
                "Suggestions:\n- Fix the line the compiler names; keep the rest of the rewrite.\n"
                "- Check includes and declarations for anything the rewrite added."
            )
        if feedback.suspect is not None:
            return (
                f"Diagnosis: {void_line(feedback.suspect)}. The output was correct but the "
                "speedup cannot be trusted, so it earned no reward.\n"
                "Suggestions:\n- Remove what the harness found: no child processes left "
                "running, no state kept between runs (shared memory, files), no extra CPUs, no "
                "reading of expected outputs or of the harness's files.\n"
                "- Make the program itself faster: a better algorithm, less input/output work."
            )
        if not feedback.correct:
            first = feedback.error.message if feedback.error else "a test failed"
            kind = feedback.error.kind if feedback.error else "wrong_answer"
            hints = {
                "timeout": "- The program is too slow or never ends on this input: look for an "
                "unbounded loop or a worse complexity than the reference.",
                "runtime_error": "- Look for out-of-bounds access, a null pointer, or deep "
                "recursion on large inputs.",
                "memory_limit": "- Use less memory: smaller types, no copies of large buffers.",
                "output_limit": "- The program prints far more than expected: check loops "
                "around the output.",
            }
            hint = hints.get(
                kind,
                "- Compare with the reference on edge cases: empty input, one element, "
                "the largest values (integer overflow), equal values (ordering of ties).",
            )
            return (
                f"Diagnosis: {kind.replace('_', ' ')} ({first}).\n"
                f"Suggestions:\n{hint}\n- Keep the output format byte for byte."
            )
        if task.kind == "kernelbench":
            return _kernelbench_critique(feedback)
        heaviest = ""
        if feedback.candidate_costs and feedback.tests:
            position = max(
                range(len(feedback.candidate_costs)), key=feedback.candidate_costs.__getitem__
            )
            share = feedback.candidate_costs[position] / max(sum(feedback.candidate_costs), 1e-12)
            heaviest = f" Test {feedback.tests[position].index} takes {share:.0%} of its time."
        return (
            f"Diagnosis: correct and {feedback.speedup:.2f}x faster than the reference.{heaviest}\n"
            "Suggestions:\n"
            "- Look for a better algorithm or data structure for the hot loop.\n"
            "- Read input and write output in bulk; avoid per-item flushes.\n"
            "- Avoid copies and allocations inside loops; keep data contiguous."
        )


def _kernelbench_critique(feedback: Feedback) -> str:
    """Rules of thumb for a correct KernelBench candidate, read off its profile."""
    diagnosis = f"Diagnosis: correct and {feedback.speedup:.2f}x faster than eager PyTorch."
    suggestions = []
    profile = feedback.profiles.get("candidate")
    if profile is not None and profile.top:
        first = profile.top[0]
        diagnosis += f" {first.share:.0%} of its time is in {first.name}."
        if profile.launches > 1.5:
            unit = "kernels" if profile.clock == "cuda" else "operators"
            suggestions.append(
                f"- It runs {profile.launches:.0f} {unit} per call: fuse them into one custom "
                "kernel that reads the input once and writes the output once."
            )
        suggestions.append(f"- Write {first.name} as a custom kernel specialised to these shapes.")
    roofline = feedback.roofline
    if roofline is not None and roofline.fraction is not None and not roofline.capped:
        diagnosis += f" It runs at {roofline.fraction:.0%} of the task's speed of light."
        if roofline.bound() == "memory" and roofline.fraction < 0.5:
            suggestions.append(
                f"- The task is memory-bound ({roofline.bytes / 1e6:.2f} MB per call): read each "
                "input once with wide, coalesced loads and write the output once."
            )
        elif roofline.bound() == "compute" and roofline.fraction < 0.5:
            suggestions.append(
                f"- The task is compute-bound ({roofline.flops / 1e9:.3f} GFLOP per call): tile "
                "the products so operands are reused from registers and shared memory."
            )
    own = [kernel for kernel in feedback.kernel_metrics if not kernel.library]
    if own and own[0].occupancy is not None and own[0].occupancy < 0.3:
        suggestions.append(
            f"- {own[0].name[:60]} reaches {own[0].occupancy:.0%} occupancy: use more threads "
            "per block or fewer registers and less shared memory per thread."
        )
    if feedback.speedup_vs_compile is not None and feedback.speedup_vs_compile < 1:
        suggestions.append(
            f"- torch.compile is still {1 / feedback.speedup_vs_compile:.2f}x faster: it fuses "
            "the operators; a hand-fused kernel should at least match it."
        )
    suggestions.append("- Keep memory access contiguous and avoid temporaries between steps.")
    return diagnosis + "\nSuggestions:\n" + "\n".join(suggestions)
