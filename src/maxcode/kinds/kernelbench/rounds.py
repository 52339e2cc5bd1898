"""Rounds of a KernelBench evaluation: timing windows, each with a fresh pair of worker
processes, combined into one speedup (``combine``).

Why. Pairing the two sides chunk by chunk cancels a load that drifts, but not a bias that lasts
a whole worker process: where a process's memory landed decides how fast it runs for its whole
life (the figures: ``docs/measurements/kernelbench-notes.md``). More calls cannot shrink that; only
fresh processes sample it, and ``r`` rounds divide it by the square root of ``r`` (forked ones
sample it too: on a CPU each round's workers are forked from a zygote per side, ``zygote.py``). The
search screens its candidates with one round (cheap, the interval's low end selects); what is
reported as a result (``maxcode eval``, the search's final re-verification) takes
``REPORTED_ROUNDS``, and more while they scatter (``scattered``), up to ``MOST_ROUNDS``, when it is
timed adaptively.

Combination. Every round is a whole evaluation: fresh seeds, checks, integrity judgement. The
first round whose verdict is not a clean correct one (wrong, failed, void) is the evaluation's
verdict (the evaluator runs no further round), except a round void only by a statistical
finding of one pair of processes (``CONFIRMED``), which a round of fresh workers must repeat
to stand (``Tally``). Otherwise the speedup is the weighted geometric mean of the rounds'
speedups, each weighted by the inverse square of its interval's width (read as a standard
deviation of the log: half the log width over ``Z975``); equal widths, equal weights. A round
whose interval is wide (a burst of load, time outside the calls charged to its low end) then
moves the result little. Its 95% interval:

- the rounds' own intervals as independent errors of the weighted mean: per side, the
  distance of each round's end from its speedup (in log) times its weight's share, root sum of
  squares (each round's interval already carries its process bias, ``PROCESS_BIAS``, and the
  time it charged outside the calls);
- the rounds' own spread: when they lie further from their mean than their intervals admit,
  the interval above is widened by that factor (the Birge ratio: the square root of their
  chi-square over ``r - 1``, when above 1). Rounds without an interval (fewer than two pairs)
  leave only their spread, with Student's t for ``r - 1`` degrees of freedom.

A round far outside the others is set aside first (``set_aside``; a ``rounds:`` warning names
it): weights trust each round's interval, and one round can be wrong with a narrow one, weighted
several times the others, which the Birge ratio widens but does not move. Three rounds are
needed to tell which is the odd one.

The torch.compile baseline, the profile and the roofline are measured in the first round only;
``speedup_vs_compile`` keeps the first round's ratio of compiled to eager time, over the
combined candidate. The timing statistics and the tests shown are the first round's; each
round's own speedup, interval and the two sides' median calls are kept in ``per_round``.
"""

from __future__ import annotations

import math
import statistics

from maxcode.config import positive_setting
from maxcode.harness.integrity import category_of, finding, void_findings
from maxcode.harness.stats import Z975, t_quantile
from maxcode.types import Feedback, RoundSpeedup

REPORTED_ROUNDS = 8
"""The least rounds of an evaluation whose speedup is reported (``maxcode eval``,
re-verification; exactly these with a fixed number of calls, ``--repeats``). A bias of each
pair of worker processes adds to every round's error, and only more rounds sample it: more
rounds narrow the combined speedup where longer windows do not
(``docs/measurements/kernelbench-notes.md``)."""

MOST_ROUNDS = 24
"""The most rounds of a reported evaluation timed adaptively: past ``REPORTED_ROUNDS`` while
they scatter (``scattered``): where rounds spread more, eight do not keep repeated evaluations of an
identical candidate within 2% of each other (``docs/measurements/kernelbench-notes.md``). The cap
bounds what an evaluation costs then."""

SCATTER = 0.005
"""The standard error of the rounds' mean log speedup (their standard deviation over the
square root of their count) at which a reported evaluation stops adding rounds: in simulation
it keeps repeated evaluations of an identical candidate within 2% of each other. The rounds'
own intervals cannot tell it: each carries the time charged outside the calls and
``PROCESS_BIAS`` and is several times wider than the rounds' spread."""


def reported_rounds(adaptive: bool) -> tuple[int, int | None]:
    """The rounds of a reported evaluation: the least, and the most when ``adaptive`` (None:
    exactly the least). ``MAXCODE_MOST_ROUNDS`` (a positive whole number) caps both, for a
    user who pays for every second of a search's re-verification (and for the test suite):
    ``REPORTED_ROUNDS`` and ``MOST_ROUNDS`` by default; below ``REPORTED_ROUNDS`` it is the
    count, and a speedup of fewer rounds samples fewer pairs of worker processes (a wider
    interval, never a weaker check: every round is still a whole evaluation)."""
    cap = positive_setting("MAXCODE_MOST_ROUNDS", int, MOST_ROUNDS, "a whole number of rounds")
    least = min(REPORTED_ROUNDS, cap)
    return least, (cap if adaptive else None)


def clean(feedback: Feedback) -> bool:
    """A round whose speedup may be combined: correct, timed, not void."""
    return feedback.correct and feedback.suspect is None and feedback.speedup > 0


CONFIRMED = frozenset({"hidden"})
"""Void findings that stand only once a round of fresh workers repeats them: statistical
verdicts on the pairs of one pair of processes, which a state of one process can fake (a
worker can make its inputs much slower for a whole round, beyond what ``OUTSIDE_BIAS`` covers,
and so void an identical candidate: ``docs/measurements/kernelbench-notes.md``). A candidate that
hides its work does so in every round."""


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
    """The rounds of one evaluation as they come (``add``), until ``wanted`` are in or one is
    not clean; then one verdict (``result``). With ``most`` (``KernelBenchSettings.round_cap``)
    above ``wanted``, clean rounds go on while they scatter (``scattered``), up to ``most``. A
    round void only by a finding of ``CONFIRMED`` is held and another round of fresh workers
    runs: void again (or worse, wrong or failed), the held round is the verdict; clean, the
    held round is set aside (its seconds count, a ``rounds`` warning names it) and the
    evaluation goes on. Once per evaluation: a second such round is a verdict as it comes."""

    def __init__(self, wanted: int, most: int | None = None) -> None:
        self.wanted = wanted
        self.most = wanted if most is None else most
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
        return len(self.done) < self.most and scattered(self.done)

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
        """The rounds combined (``combine``), with the rounds set aside said and their seconds
        counted."""
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
        update = {"phases": phases, "rounds": len(rounds), "per_round": per_round}
        return verdict.model_copy(update=update)
    first = rounds[0]
    aside = set_aside(rounds)
    kept = [done for number, done in enumerate(rounds) if number not in aside]
    centre, low, high = _estimate(kept)
    speedup = math.exp(centre)
    costs = [math.log(done.reference_cost or 1e-12) for done in kept]
    reference_cost = math.exp(statistics.fmean(costs))
    vs_compile = None
    if first.speedup_vs_compile is not None:
        vs_compile = first.speedup_vs_compile * speedup / first.speedup
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
            "speedup_vs_compile": vs_compile,
            "flags": flags,
            "phases": phases,
            "rounds": len(rounds),
            "per_round": per_round,
        }
    )


def scattered(rounds: list[Feedback]) -> bool:
    """Whether clean ``rounds`` scatter more than ``SCATTER`` allows: the standard error of
    their mean log speedup, the rounds set aside (``set_aside``) left out, as ``combine``
    leaves them out."""
    aside = set_aside(rounds)
    logs = [math.log(done.speedup) for number, done in enumerate(rounds) if number not in aside]
    if len(logs) < 2:
        return False
    return statistics.stdev(logs) / math.sqrt(len(logs)) > SCATTER


def _median_call(done: Feedback, side: str) -> float | None:
    """``side``'s median timed call in round ``done`` (None when not timed)."""
    stats = done.timings.get(side)
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
    deviations from the rounds' median: its own (from its interval) or the rounds' robust
    spread (the median absolute deviation, as a standard deviation), whichever is larger.
    At most half of the rounds can be set aside (half lie within one median absolute
    deviation); none of fewer than three, or when a round has no interval."""
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
    """The combined log speedup and the ends of its 95% interval."""
    count = len(rounds)
    logs = [math.log(done.speedup) for done in rounds]
    intervals = [done.speedup_interval for done in rounds if done.speedup_interval]
    if len(intervals) < count:
        # No round's own error to go by: the rounds' spread alone (Student's t).
        centre = statistics.fmean(logs)
        half = t_quantile(count - 1) * statistics.stdev(logs) / math.sqrt(count)
        return centre, math.exp(centre - half), math.exp(centre + half)
    below = [log - math.log(max(low, 1e-12)) for log, (low, _) in zip(logs, intervals)]
    above = [math.log(max(high, 1e-12)) - log for log, (_, high) in zip(logs, intervals)]
    sigmas = _sigmas(rounds)
    weights = [sigma**-2 for sigma in sigmas]
    shares = [weight / sum(weights) for weight in weights]
    centre = sum(share * log for share, log in zip(shares, logs))
    # The Birge ratio: how far the rounds lie from their mean in units of their own errors
    # (about 1 when the intervals tell the truth); larger, it widens the interval by itself.
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
