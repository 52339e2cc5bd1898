"""Rounds of a KernelBench evaluation: timing windows, each with a fresh pair of worker
processes, combined into one speedup (``combine``).

Pairing chunks cancels a load that drifts, not a bias that lasts a whole worker process; only
fresh processes (forked ones too: ``runner.Zygotes``) sample it, and ``r`` rounds divide it by
the square root of ``r``. A search screens with one round; a reported number takes
``LEAST_ROUNDS`` and more until their combined interval is within ``REPORTED_PRECISION`` of
the estimate (``wide``), up to ``MOST_ROUNDS``; exactly ``REPORTED_ROUNDS`` with a fixed
number of calls. Every round
is a whole evaluation; the first that is not clean is the verdict, except a void that fresh
workers must confirm (``Tally``). Otherwise the speedup is the rounds' weighted geometric mean,
an outlier set aside first (``set_aside``), with its interval from ``_estimate``. Baselines,
profile, roofline, timing statistics and tests are the first round's; ``per_round`` keeps each
round's speedup, interval and median calls.
"""

from __future__ import annotations

import math
import statistics

from maxcode.harness.integrity import category_of, finding, void_findings
from maxcode.harness.stats import Z975, t_quantile
from maxcode.home import positive_setting
from maxcode.types import Feedback, RoundSpeedup

LEAST_ROUNDS = 3
"""The fewest rounds of a reported speedup timed adaptively: the fewest whose spread shows a
round far off the others (``set_aside``)."""

REPORTED_ROUNDS = 8
"""The rounds of a reported speedup with a fixed number of calls (``--repeats``): more rounds
narrow it where longer windows do not (``docs/measurements/kernelbench-notes.md``)."""

MOST_ROUNDS = 24
"""The most rounds of a reported evaluation timed adaptively (``wide``)."""

REPORTED_PRECISION = 0.03
"""A reported speedup's rounds go on until its 95% interval is within this share of the
estimate (``--precision`` sets it): +-3%. On a CPU a round's fresh processes differ by about
2-3% (their memory layout, the load), so +-2% takes about twice the rounds; a cap reached first
leaves the interval wider, as reported."""


def reported_rounds(adaptive: bool) -> tuple[int, int | None]:
    """The rounds of a reported evaluation: the least, and the most when ``adaptive`` (None:
    exactly the least). ``MAXCODE_MOST_ROUNDS`` caps both (a wider interval, never a weaker
    check: every round is still a whole evaluation)."""
    cap = positive_setting("MAXCODE_MOST_ROUNDS", int, MOST_ROUNDS, "a whole number of rounds")
    least = min(LEAST_ROUNDS if adaptive else REPORTED_ROUNDS, cap)
    return least, (cap if adaptive else None)


def clean(feedback: Feedback) -> bool:
    """A round whose speedup may be combined: correct, timed, not void."""
    return feedback.correct and feedback.suspect is None and feedback.speedup > 0


CONFIRMED = frozenset({"hidden"})
"""Void findings that stand only once a round of fresh workers repeats them: statistical
verdicts that a state of one process can fake (``docs/measurements/kernelbench-notes.md``); a
candidate that hides its work does so in every round."""


def needs_confirming(feedback: Feedback) -> bool:
    """A void round whose every void finding is one that a second round must repeat."""
    voiding = void_findings(feedback.flags)
    return (
        feedback.correct
        and feedback.suspect is not None
        and bool(voiding)
        and all(category_of(flag) in CONFIRMED for flag in voiding)
    )


class Tally:
    """The rounds of one evaluation as they come (``add``), until ``wanted`` are in (``most``
    while their interval is wider than ``precision``: ``wide``) or one is not clean; then one
    verdict (``result``). A round void only by ``CONFIRMED`` findings is held while fresh
    workers run one more: not clean again, it is the verdict; clean, it is set aside with a
    ``rounds`` warning. Once per evaluation."""

    def __init__(
        self, wanted: int, most: int | None = None, precision: float | None = None
    ) -> None:
        self.wanted = wanted
        self.most = wanted if most is None else most
        self.precision = REPORTED_PRECISION if precision is None else precision
        self.done: list[Feedback] = []
        self.held: Feedback | None = None
        self.aside: list[tuple[int, Feedback]] = []
        """Rounds set aside, with their number (1-based, in the order run)."""

    def more(self) -> bool:
        """Whether another round is to run."""
        if self.done and not clean(self.done[-1]):
            return False
        if self.held is not None or len(self.done) < self.wanted:
            return True
        return len(self.done) < self.most and wide(self.done, self.precision)

    def add(self, feedback: Feedback) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            if clean(feedback):
                self.aside.append((len(self.done) + 1, held))  # held ran right after them
            else:
                self.done.append(held)  # confirmed: the held round is the verdict
        elif not self.aside and needs_confirming(feedback):
            self.held = feedback
            return
        self.done.append(feedback)

    def result(self) -> Feedback:
        """The rounds combined (``combine``), those set aside named, their seconds counted."""
        if self.held is not None:  # no round came to confirm it (not reached by ``more``)
            self.done.append(self.held)
            self.held = None
        combined = combine(self.done)
        if not self.aside:
            return combined
        said = [
            finding(
                "rounds",
                f"round {number} was void and the next round, with fresh workers, did not "
                f"repeat it: set aside ({held.suspect})",
            )
            for number, held in self.aside
        ]
        phases = _summed_phases([combined, *(held for _, held in self.aside)])
        return combined.model_copy(update={"phases": phases, "flags": [*combined.flags, *said]})


def combine(rounds: list[Feedback]) -> Feedback:
    """One verdict from the rounds run (see the module's docstring); phases add up."""
    if not rounds:
        raise ValueError("no rounds to combine")
    phases = _summed_phases(rounds)
    per_round = [
        RoundSpeedup(
            speedup=done.speedup,
            interval=done.speedup_interval,
            reference_s=_median_call(done, "reference"),
            candidate_s=_median_call(done, "candidate"),
        )
        for done in rounds
    ]
    unclean = next((done for done in rounds if not clean(done)), None)
    if len(rounds) == 1 or unclean is not None:
        verdict = unclean or rounds[0]
        verdict = verdict.model_copy(update={"phases": phases})
        return verdict.with_kernelbench(rounds=len(rounds), per_round=per_round)
    first = rounds[0]
    aside = set_aside(rounds)
    kept = [done for number, done in enumerate(rounds) if number not in aside]
    centre, low, high = _estimate(kept)
    speedup = math.exp(centre)
    costs = [math.log(done.reference_cost or 1e-12) for done in kept]
    reference_cost = math.exp(statistics.fmean(costs))
    vs_compile = first.kernelbench.speedup_vs_compile if first.kernelbench else None
    if vs_compile is not None:
        vs_compile = vs_compile * speedup / first.speedup
    flags: list[str] = []
    for number, done in enumerate(rounds, 1):
        flags += [f"{flag} (round {number})" for flag in done.flags]
    middle = math.exp(statistics.median(math.log(done.speedup) for done in rounds))
    for number in aside:
        flags.append(
            finding(
                "rounds",
                f"round {number + 1}'s speedup {rounds[number].speedup:.3f} was set aside, far "
                f"outside the other rounds (their median {middle:.3f})",
            )
        )
    return first.model_copy(
        update={
            "speedup": speedup,
            "speedup_interval": (low, high),
            "reference_cost": reference_cost,
            "candidate_cost": reference_cost / speedup,
            "reference_costs": [reference_cost],
            "candidate_costs": [reference_cost / speedup],
            "repeats": sum(done.repeats for done in rounds),
            "flags": flags,
            "phases": phases,
        }
    ).with_kernelbench(speedup_vs_compile=vs_compile, rounds=len(rounds), per_round=per_round)


def wide(rounds: list[Feedback], precision: float) -> bool:
    """Whether the interval clean ``rounds`` combine to (as ``combine`` reports it, those
    ``set_aside`` left out) reaches further than ``precision`` from its estimate."""
    aside = set_aside(rounds)
    kept = [done for number, done in enumerate(rounds) if number not in aside]
    if len(kept) < 2:
        return True
    centre, low, high = _estimate(kept)
    return max(centre - math.log(max(low, 1e-12)), math.log(max(high, 1e-12)) - centre) > (
        math.log1p(precision)
    )


def _median_call(done: Feedback, side: str) -> float | None:
    """``side``'s median timed call in round ``done`` (None when not timed)."""
    stats = done.kernelbench.timings.get(side) if done.kernelbench else None
    return stats.median_s if stats is not None else None


def _summed_phases(rounds: list[Feedback]) -> dict[str, float]:
    """Seconds per phase over ``rounds``."""
    phases: dict[str, float] = {}
    for done in rounds:
        for phase, seconds in done.phases.items():
            phases[phase] = round(phases.get(phase, 0.0) + seconds, 4)
    return phases


def set_aside(rounds: list[Feedback]) -> list[int]:
    """The positions of rounds whose log speedup lies more than ``OUTLIER_SIGMAS`` standard
    deviations (its own, or the rounds' median absolute deviation as one, the larger) from the
    rounds' median: one round can be wrong with a narrow interval that outweighs the others.
    None of fewer than three rounds, or when a round has no interval."""
    if len(rounds) < 3 or any(done.speedup_interval is None for done in rounds):
        return []
    logs = [math.log(done.speedup) for done in rounds]
    middle = statistics.median(logs)
    spread = _MAD_TO_SIGMA * statistics.median(abs(log - middle) for log in logs)
    return [
        number
        for number, (log, sigma) in enumerate(zip(logs, _sigmas(rounds)))
        if abs(log - middle) > OUTLIER_SIGMAS * max(sigma, spread)
    ]


def _sigmas(rounds: list[Feedback]) -> list[float]:
    """Each round's interval read as a standard deviation of its log speedup (floored)."""
    sigmas = []
    for done in rounds:
        assert done.speedup_interval is not None
        low, high = done.speedup_interval
        width = math.log(max(high, 1e-12)) - math.log(max(low, 1e-12))
        sigmas.append(max(width / (2 * Z975), SIGMA_FLOOR))
    return sigmas


def _estimate(rounds: list[Feedback]) -> tuple[float, float, float]:
    """The combined log speedup (weighted by each round's interval read as a standard
    deviation, ``_sigmas``) and the ends of its 95% interval: the rounds' errors root-sum-squared
    by their weights' shares, widened by the Birge ratio when they scatter more than their
    intervals admit. Without intervals, the rounds' spread alone (Student's t)."""
    count = len(rounds)
    logs = [math.log(done.speedup) for done in rounds]
    intervals = [done.speedup_interval for done in rounds if done.speedup_interval]
    if len(intervals) < count:
        centre = statistics.fmean(logs)
        half = t_quantile(count - 1) * statistics.stdev(logs) / math.sqrt(count)
        return centre, math.exp(centre - half), math.exp(centre + half)
    below = [log - math.log(max(low, 1e-12)) for log, (low, _) in zip(logs, intervals)]
    above = [math.log(max(high, 1e-12)) - log for log, (_, high) in zip(logs, intervals)]
    sigmas = _sigmas(rounds)
    weights = [sigma**-2 for sigma in sigmas]
    shares = [weight / sum(weights) for weight in weights]
    centre = sum(share * log for share, log in zip(shares, logs))
    chi2 = sum(((log - centre) / sigma) ** 2 for log, sigma in zip(logs, sigmas))
    ratio = max(1.0, math.sqrt(chi2 / (count - 1)))
    down = ratio * math.sqrt(sum((share * d) ** 2 for share, d in zip(shares, below)))
    up = ratio * math.sqrt(sum((share * u) ** 2 for share, u in zip(shares, above)))
    return centre, math.exp(centre - down), math.exp(centre + up)


_MAD_TO_SIGMA = 1.4826
"""A normal distribution's standard deviation per median absolute deviation."""
SIGMA_FLOOR = 1e-3
"""The least standard deviation a round's interval is read as (a round's weight is bounded)."""
OUTLIER_SIGMAS = 4.0
"""How far from the rounds' median a round is set aside, in standard deviations
(``set_aside``): rounds whose intervals tell the truth pass it about once in 16,000."""
