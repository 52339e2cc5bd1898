"""The critic: turns what the harness measured into a diagnosis and concrete suggestions."""

from __future__ import annotations

from typing import Protocol

from maxcode.kinds import kind_of
from maxcode.llm import (
    DEFAULT_REQUEST_TIMEOUT_S,
    LLMProvider,
    LLMRequest,
    ReasoningEffort,
    stable_prefix,
)
from maxcode.search.observation import build_critic_prompt, void_line
from maxcode.search.tree import Node
from maxcode.tasks import Task


class Critic(Protocol):
    """Writes a critique of one evaluated node."""

    name: str
    """What wrote the critiques (stored with them)."""

    async def critique(self, task: Task, node: Node, purpose: str) -> str:
        """The diagnosis and suggestions for ``node`` (``purpose`` keys the LLM call)."""
        ...


class LLMCritic:
    """A critic backed by a language model."""

    def __init__(
        self,
        provider: LLMProvider,
        max_tokens: int = 1024,
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        reasoning_effort: ReasoningEffort | None = None,
        prompt_cache: bool = True,
    ) -> None:
        self.provider = provider
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.reasoning_effort: ReasoningEffort | None = reasoning_effort
        self.prompt_cache = prompt_cache
        self.name = provider.spec

    async def critique(self, task: Task, node: Node, purpose: str) -> str:
        system, user = build_critic_prompt(task, node)
        request = LLMRequest.from_prompt(
            user,
            system=system,
            # Every critique of a run opens with the same task and reference.
            cache_prefix=stable_prefix(user, task.reference) if self.prompt_cache else 0,
            temperature=0.2,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            reasoning_effort=self.reasoning_effort,
            purpose=purpose,
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
        return kind_of(task).critique(feedback)
