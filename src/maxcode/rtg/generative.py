"""The generative reward-to-go model: any provider asked for the expected best speedup.

Zero-shot with an API model, or a fine-tuned model served by vLLM with its LoRA adapter
(``rtg:vllm/<adapter-name>`` with ``--base-url``)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable

from maxcode.llm import LLMCall, LLMProvider, LLMRequest

Replay = Callable[[str], "LLMCall | None"]
"""Looks up a call already recorded for a purpose (a resumed run's store)."""

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

PROMPT = """You predict how much faster a program will end up after a search that starts from it.
Below are the situation the programmer was in and the program they wrote. Estimate the best
speedup over the reference (1.0 = as fast; 0 = wrong or broken) reachable from this program.
Answer with one number only.

## Situation
{observation}

## Program
```
{candidate}
```
"""


class GenerativeModel:
    """Scores candidates by asking a model to state the expected future best speedup."""

    def __init__(self, provider: LLMProvider, replay: Replay | None = None) -> None:
        self.provider = provider
        self.name = provider.spec
        self.replay = replay

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One number per candidate; an answer with no number scores 0."""
        # Every call finishes (and is recorded) before a failure, a spent budget say, is raised.
        results = await asyncio.gather(
            *(self._one(observation, c) for c in candidates), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [float(result) for result in results]  # type: ignore[arg-type]

    async def _one(self, observation: str, candidate: str) -> float:
        prompt = PROMPT.format(observation=observation[-6000:], candidate=candidate)
        # The purpose names the question, so a resumed run finds its recorded answer.
        purpose = "value:" + hashlib.sha256(prompt.encode()).hexdigest()[:16]
        recorded = self.replay(purpose) if self.replay is not None else None
        if recorded is not None and recorded.responses:
            return parse_score(recorded.responses[0])
        request = LLMRequest.from_prompt(prompt, temperature=0.0, max_tokens=16, purpose=purpose)
        completions = await self.provider.generate(request)
        return parse_score(completions[0].text if completions else "")


def parse_score(text: str) -> float:
    """The first number in an answer, at least 0 (0 when there is none)."""
    found = _NUMBER.search(text)
    return max(float(found.group()), 0.0) if found else 0.0
