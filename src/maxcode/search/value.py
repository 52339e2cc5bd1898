"""Action values: scores for candidates before they run, so the budget goes to promising ones."""

from __future__ import annotations

from typing import Protocol

from maxcode.errors import MaxcodeError


class ValueFunction(Protocol):
    """Scores candidate programs for an observation (higher: more promising)."""

    name: str

    def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One score per candidate."""
        ...


def make_value(spec: str) -> ValueFunction | None:
    """The value function ``--value`` names; ``none`` ranks nothing."""
    if spec == "none":
        return None
    if spec.startswith("rtg:"):
        raise MaxcodeError(
            f"--value {spec}: reward-to-go models are not available yet; use --value none"
        )
    raise MaxcodeError(f"unknown value function {spec!r} (none, or rtg:PATH)")
