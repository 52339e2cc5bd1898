"""Action values: scores for candidates before they run, so the budget goes to promising ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from maxcode.errors import MaxcodeError

if TYPE_CHECKING:
    from maxcode.llm import Budget, CallLog, LLMCall


class ValueFunction(Protocol):
    """Scores candidate programs for an observation (higher: more promising)."""

    name: str

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One score per candidate."""
        ...


def make_value(
    spec: str,
    base_url: str | None = None,
    *,
    budget: Budget | None = None,
    call_log: CallLog | None = None,
    replay: Callable[[str], LLMCall | None] | None = None,
) -> ValueFunction | None:
    """The value function ``--value`` names: ``none``, ``rtg:DIR`` (a trained model) or
    ``rtg:provider/model`` (the generative model: LLM calls like the policy's, stored in
    ``call_log``, counted against ``budget``, replayed by ``replay`` on a resumed run)."""
    if spec == "none":
        return None
    if spec.startswith("rtg:") and len(spec) > 4:
        from maxcode.rtg import load_model

        model: ValueFunction = load_model(
            spec[4:], base_url=base_url, budget=budget, call_log=call_log, replay=replay
        )
        return model
    raise MaxcodeError(f"unknown value function {spec!r} (none, rtg:DIR or rtg:provider/model)")
