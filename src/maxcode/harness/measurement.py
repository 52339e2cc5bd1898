"""One timing loop for every kind: rounds of paired reference and candidate costs, kept raw in
a ``Measurement``, until a stop rule says the speedup's interval is narrow enough, lies surely
below a search's bar, or a cap is reached.

A kind supplies what one batch of rounds is (``take``: it runs them and adds their costs, or
returns the verdict that ends the timing, a failed run) and picks a rule:

- ``Precision``: rounds until the interval is within a share of its estimate, with caps on
  rounds and seconds (C++ programs);
- ``FixedRounds``: a fixed count (a project's ``repeats``).

Both stop a search's screen as soon as the interval lies wholly below its bar
(``SpeedupInterval.surely_below``): such a candidate cannot be kept, whatever more rounds say.
KernelBench times in rounds of fresh workers, each a whole evaluation, and decides its own
rounds (``maxcode.kinds.kernelbench.rounds``) with the same bar.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from maxcode.harness.stats import SpeedupInterval, paired_speedup

Ended = TypeVar("Ended")
"""What ends a timing early (a kind's verdict for a failed timed run)."""


@dataclass
class Measurement:
    """Paired costs, one reference and one candidate cost per round, kept as measured; the
    interval is derived from them when asked."""

    floor: float
    """Costs below this count as this (a clock's resolution): no ratio divides by zero."""
    reference: list[float] = field(default_factory=list)
    """The reference's cost in each round."""
    candidate: list[float] = field(default_factory=list)
    """The candidate's cost in each round."""
    elapsed_s: float = 0.0
    """Seconds the rounds took, with everything around the runs (sandbox starts, folders)."""

    @property
    def rounds(self) -> int:
        """Rounds measured so far."""
        return len(self.candidate)

    def add(self, reference: float, candidate: float) -> None:
        """One round's costs."""
        self.reference.append(reference)
        self.candidate.append(candidate)

    def interval(self) -> SpeedupInterval:
        """The paired speedup of the rounds so far, with its 95% interval."""
        return paired_speedup(self.reference, self.candidate, floor=self.floor)


class StopRule(Protocol):
    """When a timing stops adding rounds."""

    def more(self, interval: SpeedupInterval, rounds: int, elapsed_s: float) -> int:
        """How many more rounds to time after ``rounds`` rounds that took ``elapsed_s`` seconds
        and gave ``interval`` (0: stop)."""
        ...


@dataclass(frozen=True)
class Precision:
    """Rounds until the interval reaches no further than ``target`` from its estimate, or a
    cap: ``most`` rounds, ``budget_s`` seconds. The width shrinks about as one over the square
    root of the rounds: a batch asks for what should bring it within the target, at least
    ``least_batch`` and at most as many again as so far (each batch costs a start)."""

    target: float
    """The interval's half-width to reach, as a share of its estimate (0.02: +-2%)."""
    most: int
    """The most rounds."""
    budget_s: float
    """Seconds of timing after which no batch is started."""
    least_batch: int = 1
    """The fewest rounds added at a time."""
    bar: float | None = None
    """A search's screen stops once the interval lies wholly below this reward. One above it
    goes on to the full precision: a winner timed to a wider interval than its rivals would
    have a lower reward (the interval's low end) than they for the same speed."""

    def more(self, interval: SpeedupInterval, rounds: int, elapsed_s: float) -> int:
        if interval.surely_below(self.bar):
            return 0
        if interval.narrow(self.target) or rounds >= self.most:
            return 0
        per_round_s = elapsed_s / rounds
        affordable = int((self.budget_s - elapsed_s) / per_round_s) if per_round_s > 0 else rounds
        wanted = math.ceil(rounds * (interval.relative_half_width / self.target) ** 2) - rounds
        return max(min(max(wanted, self.least_batch), rounds, self.most - rounds, affordable), 0)


@dataclass(frozen=True)
class FixedRounds:
    """``count`` rounds, one at a time, unless a screen's interval lies wholly below ``bar``
    first (from the sixth round: ``stats.covers_median``)."""

    count: int
    """The rounds to time."""
    bar: float | None = None
    """As ``Precision.bar``."""

    def more(self, interval: SpeedupInterval, rounds: int, elapsed_s: float) -> int:
        if rounds >= self.count or interval.surely_below(self.bar):
            return 0
        return 1


def time_rounds(
    take: Callable[[int], Ended | None], measurement: Measurement, rule: StopRule, first: int
) -> Ended | None:
    """Time ``first`` rounds, then as many more as ``rule`` asks after each batch: ``take(n)``
    runs ``n`` rounds and adds their costs to ``measurement``, or returns what ends the timing
    (returned as is). None: the timing ran to its end, ``measurement`` holds it."""
    batch = first
    while batch > 0:
        began = time.perf_counter()
        ended = take(batch)
        measurement.elapsed_s += time.perf_counter() - began
        if ended is not None:
            return ended
        batch = rule.more(measurement.interval(), measurement.rounds, measurement.elapsed_s)
    return None
