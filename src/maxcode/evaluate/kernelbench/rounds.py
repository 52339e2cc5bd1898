"""Rounds of a KernelBench evaluation: timing windows, each with a fresh pair of worker
processes, combined into one speedup (``combine``).

Why. Pairing the two sides chunk by chunk cancels a load that drifts, but not a bias that lasts
a whole worker process: on this project's virtual machine identical ``1_ScaledGELU``
candidates timed for 400 calls a side (pairs' intervals of +-0.5-1%) still spread 0.9% (sd of
the log speedup) from one evaluation to the next, and more when the physical pages behind the
workers' memory were shuffled (2.1%): where a process's memory landed decides how fast it runs
for its whole life. More calls cannot shrink that; only fresh processes sample it, and ``r``
rounds divide it by the square root of ``r``. The search screens its candidates with one round
(cheap, the interval's low end selects); what is reported as a result (``maxcode eval``, the
search's final re-verification) takes ``REPORTED_ROUNDS``.

Combination. Every round is a whole evaluation: fresh seeds, checks, integrity judgement. The
first round whose verdict is not a clean correct one (wrong, failed, void) is the evaluation's
verdict (the evaluator runs no further round). Otherwise the speedup is the weighted geometric
mean of the rounds' speedups, each weighted by the inverse square of its interval's width (read
as a standard deviation of the log: half the log width over 1.96); equal widths, equal
weights. A round whose interval is wide (a burst of load, time outside the calls charged to its
low end) then moves the result little (unweighted, an identical ``level1/100_HingeLoss`` at
``--scale 0.1`` once scored 0.736 from two rounds, with an interval of 0.000-2985). Its 95%
interval:

- the rounds' own intervals as independent errors of the weighted mean: per side, the
  distance of each round's end from its speedup (in log) times its weight's share, root sum of
  squares (each round's interval already carries its process bias, ``PROCESS_BIAS``, and the
  time it charged outside the calls);
- the rounds' own spread: when they lie further from their mean than their intervals admit,
  the interval above is widened by that factor (the Birge ratio: the square root of their
  chi-square over ``r - 1``, when above 1). Rounds without an interval (fewer than two pairs)
  leave only their spread, with Student's t for ``r - 1`` degrees of freedom.

The torch.compile baseline, the profile and the roofline are measured in the first round only;
``speedup_vs_compile`` keeps the first round's ratio of compiled to eager time, over the
combined candidate. The timing statistics and the tests shown are the first round's.
"""

from __future__ import annotations

import math
import statistics

from maxcode.evaluate.kernelbench.schedule import t_quantile
from maxcode.types import Feedback

REPORTED_ROUNDS = 4
"""Rounds of an evaluation whose speedup is reported (``maxcode eval``, re-verification).
Within one round the window stops near +-2% (a standard deviation near 1%) and the process bias
adds about 0.9%; four rounds bring the sum near 0.67%, what six evaluations of an identical
program need for a max/min of about 1.02."""


def clean(feedback: Feedback) -> bool:
    """A round whose speedup may be combined: correct, timed, not void."""
    return feedback.correct and feedback.suspect is None and feedback.speedup > 0


def combine(rounds: list[Feedback]) -> Feedback:
    """One verdict from the rounds run (see the module's docstring); phases add up."""
    if not rounds:
        raise ValueError("no rounds to combine")
    phases: dict[str, float] = {}
    for done in rounds:
        for phase, seconds in done.phases.items():
            phases[phase] = round(phases.get(phase, 0.0) + seconds, 4)
    unclean = next((done for done in rounds if not clean(done)), None)
    if len(rounds) == 1 or unclean is not None:
        verdict = unclean or rounds[0]
        return verdict.model_copy(update={"phases": phases, "rounds": len(rounds)})
    first = rounds[0]
    centre, low, high = _estimate(rounds)
    speedup = math.exp(centre)
    costs = [math.log(done.reference_cost or 1e-12) for done in rounds]
    reference_cost = math.exp(statistics.fmean(costs))
    vs_compile = None
    if first.speedup_vs_compile is not None:
        vs_compile = first.speedup_vs_compile * speedup / first.speedup
    flags: list[str] = []
    for number, done in enumerate(rounds, 1):
        flags += [f"{flag} (round {number})" for flag in done.flags]
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
        }
    )


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
    sigmas = [max((down + up) / (2 * _Z975), SIGMA_FLOOR) for down, up in zip(below, above)]
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


_Z975 = 1.959964
SIGMA_FLOOR = 1e-3
"""The least standard deviation a round's interval is read as (a round's weight is bounded)."""
