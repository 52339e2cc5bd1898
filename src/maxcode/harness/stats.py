"""Speedups and their 95% confidence intervals from paired timings, and the quantiles they use.

Reference and candidate are timed in the same window, in pairs (the two ran back to back, so a
load that lasts a pair hits both). Two estimators, for two ways of pairing:

- ``paired_speedup`` (the C++ evaluator, project tasks): one cost per side and round. The
  speedup is the median of the per-round ratios ``reference / candidate``, and its interval
  the distribution-free one for a median: two order statistics chosen from the binomial
  distribution. It assumes only that rounds are independent draws of one distribution, not
  that noise is normal: a preempted round moves one ratio to the tail, not the estimate or the
  interval much. Below six rounds no pair of order statistics reaches 95%: the interval is
  then the whole range of the ratios (its coverage ``1 - 2 ** (1 - n)``).
- ``chunk_pair_speedup`` (KernelBench): per-call times of chunks, chunk n of each side a pair.
  The speedup is exp of the 20%-trimmed mean of the log ratios of the chunks' mean calls, its
  interval Yuen's t interval for that trimmed mean (``trimmed_interval``). A chunk counts by
  its mean, never by an order statistic of its calls: a chunk's inputs all exist before its
  first call, and a candidate that computed every answer in that call has calls that are
  mostly lookups (``look_ahead.py``). Trimming keeps a pair that a burst hit on one side only
  (page faults, a preemption) from moving the estimate; the log makes the interval symmetric
  for speedups and slowdowns. ``paired_excess`` is the same estimator on differences.

Stdlib only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

CONFIDENCE = 0.95
"""The confidence of every interval maxcode reports."""
Z975 = 1.959964
"""The 97.5% quantile of the standard normal distribution: a 95% interval is +-Z975 sigma."""


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

    def surely_below(self, bar: float | None) -> bool:
        """A search's screen can stop: the interval is a whole one (``covers_median``) and lies
        below ``bar`` (None: no bar), so the candidate cannot be kept whatever more rounds say."""
        return bar is not None and covers_median(self.samples) and self.high < bar


def paired_speedup(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    floor: float = 1e-9,
) -> SpeedupInterval:
    """The speedup of ``candidate`` over ``reference`` from paired costs (round i of one goes
    with round i of the other), the median ratio; costs below ``floor`` count as ``floor``."""
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


def covers_median(count: int, confidence: float = CONFIDENCE) -> bool:
    """Whether ``count`` samples give an interval of their median with at least ``confidence``
    (their whole range misses it only when all fall on one side): six or more for 95%."""
    return 1.0 - 2.0 * 0.5**count >= confidence


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


# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(degrees: int) -> float:
    """The 97.5% quantile of Student's t (a table to 30 degrees, Cornish-Fisher beyond)."""
    if degrees < 1:
        return math.inf
    if degrees <= len(_T975):
        return _T975[degrees - 1]
    z = Z975
    return z + (z**3 + z) / (4 * degrees) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * degrees**2)


WARM_PAIRS_FROM = 3
"""From this many pairs on, the first one is left out of a chunk-pair estimate: its chunks are
the first timed after the checks (fresh memory touched, a process just moved to its CPU) and
were seen off by up to 1.5x either way."""
TRIM = 0.2
"""Share of the values cut from each end before averaging (Yuen's trimmed mean)."""
_CHUNK_FLOOR_S = 1e-9
"""The least mean call a chunk counts as (a ratio stays finite)."""


@dataclass(frozen=True)
class PairedEstimate:
    """A speedup from paired chunks (``chunk_pair_speedup``) and its 95% interval."""

    speedup: float
    low: float | None
    """None with fewer than two pairs."""
    high: float | None
    pairs: int
    """Pairs the estimate counts (the warm-up pair left out)."""

    def narrow(self, target: float) -> bool:
        """The interval lies within ``target`` (relative) of the speedup on both sides."""
        if self.low is None or self.high is None:
            return False
        return self.high <= self.speedup * (1 + target) and self.low >= self.speedup * (1 - target)

    def with_process_bias(self, spread: float) -> PairedEstimate:
        """The interval widened for a bias that lasts a whole process (``spread``, a standard
        deviation of the log speedup): its log half-width and ``Z975 * spread`` added in
        quadrature. Pairs measure only the noise within the two processes, so timing stops on
        the pairs' interval (``narrow``) and the reported one carries both."""
        if self.low is None or self.high is None or self.speedup <= 0:
            return self
        half = math.log(self.high / self.low) / 2
        wide = math.hypot(half, Z975 * spread)
        centre = math.log(self.speedup)
        return PairedEstimate(
            self.speedup, math.exp(centre - wide), math.exp(centre + wide), self.pairs
        )


def chunk_pair_speedup(
    reference: list[list[float]], candidate: list[list[float]]
) -> PairedEstimate:
    """The speedup from per-chunk call times of both sides: exp of the trimmed mean of the log
    ratios of chunk n's mean calls (chunks without a partner, or empty, are left out; the
    first pair too from ``WARM_PAIRS_FROM`` pairs on). See the module's docstring."""
    logs = [
        math.log(
            max(statistics.fmean(ref), _CHUNK_FLOOR_S) / max(statistics.fmean(cand), _CHUNK_FLOOR_S)
        )
        for ref, cand in zip(reference, candidate)
        if ref and cand
    ]
    if not logs:
        return PairedEstimate(0.0, None, None, 0)
    if len(logs) >= WARM_PAIRS_FROM:
        logs = logs[1:]
    centre, half = trimmed_interval(logs)
    if half is None:
        return PairedEstimate(math.exp(centre), None, None, len(logs))
    return PairedEstimate(
        math.exp(centre), math.exp(centre - half), math.exp(centre + half), len(logs)
    )


@dataclass(frozen=True)
class PairedExcess:
    """Seconds per call the candidate spent outside its timed calls beyond the reference, over
    paired chunks, with the 95% interval (None with fewer than two pairs)."""

    seconds: float
    low: float | None
    high: float | None


def paired_excess(
    reference: list[float], candidate: list[float], spread: float = 0.0
) -> PairedExcess:
    """The difference, chunk pair by chunk pair, of the two sides' host seconds per call
    outside their timed calls: the same inputs are made and the same outputs sent on both
    sides, so it is about 0 unless the candidate moved work there. The estimator of
    ``chunk_pair_speedup`` (warm-up pair left out, trimmed mean, Yuen's interval) on the
    differences. ``spread``: a bias that lasts a whole process, relative to the reference's
    time, added to the interval in quadrature, as ``PairedEstimate.with_process_bias`` does."""
    differences = [cand - ref for ref, cand in zip(reference, candidate)]
    if not differences:
        return PairedExcess(0.0, None, None)
    if len(differences) >= WARM_PAIRS_FROM:
        differences = differences[1:]
    centre, half = trimmed_interval(differences)
    if half is None:
        return PairedExcess(centre, None, None)
    half = math.hypot(half, Z975 * spread * abs(statistics.median(reference)))
    return PairedExcess(centre, centre - half, centre + half)


def trimmed_interval(values: list[float]) -> tuple[float, float | None]:
    """The ``TRIM``-trimmed mean of ``values`` and the half-width of its 95% interval (Yuen:
    the winsorized variance, t with n - 2g - 1 degrees of freedom); None with too few values.
    With fewer than five values nothing is cut and it is the plain t interval."""
    ordered = sorted(values)
    n = len(ordered)
    cut = int(TRIM * n)
    kept = ordered[cut : n - cut]
    centre = statistics.fmean(kept)
    degrees = n - 2 * cut - 1
    if degrees < 1:
        return centre, None
    winsorized = [min(max(value, kept[0]), kept[-1]) for value in ordered]
    spread = statistics.stdev(winsorized)
    half = t_quantile(degrees) * spread / ((1 - 2 * cut / n) * math.sqrt(n))
    return centre, half
