"""A speedup and its confidence interval from paired timings.

Reference and candidate are timed in the same window, one pair of samples per round (the two
ran back to back, so a load that lasts a round hits both). Each round gives one ratio
``reference / candidate``; the speedup is the median of the ratios, and its interval is the
distribution-free one for a median: two order statistics of the ratios, chosen from the
binomial distribution so that the true median lies between them with the confidence asked
for. It assumes only that rounds are independent draws of one distribution, not that noise is
normal: a preempted round moves one ratio to the tail, not the estimate or the interval much.

Below six rounds no pair of order statistics reaches 95%: the interval is then the whole range
of the ratios (its coverage ``1 - 2 ** (1 - n)``, 94% at five rounds, 50% at two).

Stdlib only; used by the C++ evaluator, project tasks and anything else that times in pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

CONFIDENCE = 0.95
"""The confidence of every interval maxcode reports."""


class SpeedupInterval(NamedTuple):
    """A speedup (reference cost / candidate cost) with its confidence interval."""

    estimate: float
    """The median of the per-round ratios."""
    low: float
    """Lower end of the interval (a conservative speedup)."""
    high: float
    """Upper end of the interval."""
    samples: int
    """Paired rounds behind it."""

    @property
    def relative_half_width(self) -> float:
        """How far the interval reaches from the estimate, as a share of it (0.02: +-2%);
        the larger of the two sides."""
        if self.estimate <= 0:
            return math.inf
        return max(self.high / self.estimate - 1.0, 1.0 - self.low / self.estimate)

    def narrow(self, tolerance: float) -> bool:
        """The interval reaches no further than ``tolerance`` (a share) from the estimate."""
        return self.relative_half_width <= tolerance


def paired_speedup(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    floor: float = 1e-9,
) -> SpeedupInterval:
    """The speedup of ``candidate`` over ``reference`` from paired costs (round i of one goes
    with round i of the other); costs below ``floor`` count as ``floor``."""
    if len(reference) != len(candidate):
        raise ValueError(f"unpaired samples: {len(reference)} against {len(candidate)}")
    if not reference:
        raise ValueError("no samples")
    ratios = [max(ref, floor) / max(cand, floor) for ref, cand in zip(reference, candidate)]
    return ratio_interval(ratios, confidence=confidence)


def ratio_interval(ratios: Sequence[float], *, confidence: float = CONFIDENCE) -> SpeedupInterval:
    """Median of per-round ratios and the order-statistic interval around it."""
    if not ratios:
        raise ValueError("no samples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    ordered = sorted(ratios)
    count = len(ordered)
    rank = median_rank(count, confidence)
    return SpeedupInterval(
        estimate=_median(ordered),
        low=ordered[rank - 1],
        high=ordered[count - rank],
        samples=count,
    )


def median_rank(count: int, confidence: float = CONFIDENCE) -> int:
    """The 1-based rank k such that (k-th smallest, k-th largest) of ``count`` samples covers
    the median with at least ``confidence``; 1 (the whole range) when no rank does."""
    tail = (1.0 - confidence) / 2.0
    rank = 1
    # Rank k misses the median on one side when fewer than k samples fall below it:
    # P(Binomial(count, 1/2) <= k - 1). Take the largest k whose miss stays within the tail.
    below = math.comb(count, 0) / 2.0**count
    while rank < count and below + math.comb(count, rank) / 2.0**count <= tail:
        below += math.comb(count, rank) / 2.0**count
        rank += 1
    return rank


def exact(speedup: float) -> SpeedupInterval:
    """The interval of a deterministic cost (instruction counts): the point itself."""
    return SpeedupInterval(speedup, speedup, speedup, 1)


def _median(ordered: Sequence[float]) -> float:
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return math.sqrt(ordered[middle - 1] * ordered[middle])
