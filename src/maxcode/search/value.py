"""Action values: scores for candidates before they run, so the budget goes to promising ones."""

from __future__ import annotations

from typing import Protocol

from maxcode.errors import MaxcodeError


class ValueFunction(Protocol):
    """Scores candidate programs for an observation (higher: more promising)."""

    name: str

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One score per candidate."""
        ...


def make_value(spec: str, base_url: str | None = None) -> ValueFunction | None:
    """The value function ``--value`` names: ``none``, ``rtg:DIR`` (a trained model) or
    ``rtg:provider/model`` (the generative model)."""
    if spec == "none":
        return None
    if spec.startswith("rtg:") and len(spec) > 4:
        from maxcode.rtg import load_model

        model: ValueFunction = load_model(spec[4:], base_url=base_url)
        return model
    raise MaxcodeError(f"unknown value function {spec!r} (none, rtg:DIR or rtg:provider/model)")
