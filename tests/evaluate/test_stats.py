"""The paired estimators (maxcode.harness.stats): the median-ratio interval of paired rounds,
and KernelBench's trimmed estimate of paired chunks; pure arithmetic, no timing."""

from __future__ import annotations

import math
import random

import pytest

from maxcode.harness.stats import (
    Z975,
    chunk_pair_speedup,
    exact,
    median_rank,
    paired_excess,
    paired_speedup,
    ratio_interval,
    t_quantile,
)
from maxcode.kinds.kernelbench.parameters import OUTSIDE_BIAS, TARGET


@pytest.mark.parametrize(
    ("count", "rank"), [(2, 1), (5, 1), (6, 1), (8, 1), (9, 2), (17, 5), (20, 6), (30, 10)]
)
def test_median_rank_matches_the_binomial_table(count: int, rank: int) -> None:
    assert median_rank(count) == rank


def test_paired_speedup_is_the_median_ratio_with_its_order_statistics() -> None:
    reference = [2.0, 2.2, 1.8, 2.0, 2.0, 2.04]
    interval = paired_speedup(reference, [1.0] * 6)
    assert interval.estimate == pytest.approx(2.0)
    assert (interval.low, interval.high) == (1.8, 2.2)
    assert interval.samples == 6
    assert interval.relative_half_width == pytest.approx(0.1)
    assert not interval.narrow(0.02) and interval.narrow(0.1 + 1e-9)


def test_one_preempted_round_moves_neither_estimate_nor_interval_much() -> None:
    ratios = [1.0 + 0.001 * (i % 5) for i in range(20)]
    clean = ratio_interval(ratios)
    spoiled = ratio_interval([*ratios[:-1], 3.0])
    assert spoiled.estimate == pytest.approx(clean.estimate, rel=0.002)
    assert spoiled.high < 1.01


def test_the_interval_covers_the_true_ratio_about_as_often_as_it_says() -> None:
    generator = random.Random(16)
    covered = 0
    trials = 400
    for _ in range(trials):
        ratios = [math.exp(generator.gauss(0.0, 0.05)) for _ in range(15)]
        interval = ratio_interval(ratios)
        covered += interval.low <= 1.0 <= interval.high
    assert covered / trials >= 0.93


def test_floor_unpaired_and_empty_samples() -> None:
    assert paired_speedup([1.0], [0.0], floor=0.5).estimate == 2.0
    with pytest.raises(ValueError, match="unpaired"):
        paired_speedup([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no samples"):
        paired_speedup([], [])
    assert exact(1.5) == (1.5, 1.5, 1.5, 1)


def test_the_paired_estimate_is_a_geometric_mean_of_chunk_mean_ratios() -> None:
    reference = [[2.0, 2.0, 8.0], [4.0, 4.0, 4.0]]
    candidate = [[1.0, 1.0, 1.0], [1.0, 4.0, 1.0]]
    estimate = chunk_pair_speedup(reference, candidate)
    assert estimate.pairs == 2
    assert estimate.speedup == pytest.approx(math.sqrt((12.0 / 3.0) * (12.0 / 6.0)))
    assert estimate.low is not None and estimate.high is not None
    assert estimate.low < estimate.speedup < estimate.high


def test_work_moved_between_the_calls_of_a_chunk_moves_nothing() -> None:
    """A chunk's inputs all exist before its first call: a candidate can do the whole chunk's
    work in that call and look up the rest (``look_ahead.py``). The chunk counts whole."""
    reference = [[1.0] * 8] * 6
    spread = chunk_pair_speedup(reference, [[1.0] * 8] * 6)
    ahead = chunk_pair_speedup(reference, [[8.0] + [1e-6] * 7] * 6)
    assert ahead.speedup == pytest.approx(spread.speedup, rel=1e-5) == pytest.approx(1.0, rel=1e-5)


def test_equal_chunk_ratios_give_a_point_interval_and_one_pair_none() -> None:
    same = chunk_pair_speedup([[1.0]] * 5, [[0.5]] * 5)
    assert same.speedup == pytest.approx(2.0)
    assert same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    assert same.narrow(TARGET)
    one = chunk_pair_speedup([[1.0]], [[1.0]])
    assert one.low is None and one.high is None and not one.narrow(TARGET)
    assert chunk_pair_speedup([], []).pairs == 0


def test_a_process_bias_widens_the_interval_in_quadrature_but_not_the_stopping() -> None:
    same = chunk_pair_speedup([[1.0]] * 5, [[0.5]] * 5)  # pairs alone: a point interval at 2x
    wide = same.with_process_bias(0.015)
    assert wide.speedup == same.speedup and wide.pairs == same.pairs
    assert wide.low == pytest.approx(2.0 * math.exp(-Z975 * 0.015))
    assert wide.high == pytest.approx(2.0 * math.exp(Z975 * 0.015))
    assert same.narrow(TARGET) and not wide.narrow(TARGET)  # +-2.9%: stops on the pairs' width
    noisy = chunk_pair_speedup([[5.0], [1.0], [1.1], [0.9], [1.05]], [[1.0]] * 5)
    assert noisy.low is not None and noisy.high is not None
    half = math.log(noisy.high / noisy.low) / 2
    widened = noisy.with_process_bias(0.015)
    assert widened.low is not None and widened.high is not None
    assert math.log(widened.high / widened.low) / 2 == pytest.approx(math.hypot(half, Z975 * 0.015))
    assert chunk_pair_speedup([[1.0]], [[1.0]]).with_process_bias(0.015).low is None


def test_a_pair_hit_on_one_side_only_barely_moves_the_trimmed_estimate() -> None:
    steady = [[1.0]] * 10
    hit = chunk_pair_speedup([[1.0]] * 9 + [[3.0]], steady)  # one pair 3x off
    assert hit.pairs == 9  # the first pair warms up
    assert hit.speedup == pytest.approx(1.0)
    assert hit.low is not None and hit.high is not None and hit.low <= 1.0 <= hit.high


def test_the_interval_is_a_t_interval_on_the_log_ratios() -> None:
    ratios = [1.0, 1.1, 0.9, 1.05]
    # A first (warm-up) pair far off is left out: the estimate is the other four's.
    estimate = chunk_pair_speedup([[5.0]] + [[r] for r in ratios], [[1.0]] * 5)
    logs = [math.log(r) for r in ratios]
    centre = sum(logs) / 4
    spread = math.sqrt(sum((x - centre) ** 2 for x in logs) / 3)
    half = 3.182 * spread / 2
    assert estimate.low == pytest.approx(math.exp(centre - half))
    assert estimate.high == pytest.approx(math.exp(centre + half))
    assert t_quantile(1) == pytest.approx(12.706)
    assert t_quantile(30) == pytest.approx(2.042, abs=1e-3)
    assert t_quantile(31) == pytest.approx(2.040, abs=2e-3)  # Cornish-Fisher beyond the table
    assert t_quantile(10_000) == pytest.approx(1.96, abs=1e-3)


def test_outside_time_is_compared_pair_by_pair() -> None:
    """The excess is the candidate's outside time less the reference's, chunk pair by pair
    (warm-up pair left out): a shared drift cancels, a constant hidden cost stands out.
    Whole numbers: the arithmetic is exact."""
    drifting = [9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    same = paired_excess(drifting, [value + 1 for value in drifting])
    assert same.seconds == same.low == same.high == 1.0
    hidden = paired_excess(drifting, [value + 5 + n % 2 for n, value in enumerate(drifting)])
    assert hidden.seconds == 5.5 and hidden.low is not None and hidden.low > 0
    assert paired_excess([], []).low is None and paired_excess([1.0], [2.0]).seconds == 1.0


def test_a_process_bias_widens_the_outside_excess_in_proportion_to_the_reference() -> None:
    """A steady 7% difference in making 120 ms of inputs is sure from the pairs alone, not
    once a process term relative to the reference's time (``OUTSIDE_BIAS``) is added; hidden
    work that dwarfs the term stays sure."""
    reference = [120.0 + n % 3 for n in range(10)]
    biased = [value * 1.07 for value in reference]
    pairs_alone = paired_excess(reference, biased)
    assert pairs_alone.low is not None and pairs_alone.low > 0
    widened = paired_excess(reference, biased, OUTSIDE_BIAS)
    assert widened.seconds == pairs_alone.seconds
    assert widened.low is not None and widened.low < 0 < widened.seconds
    hidden = paired_excess(reference, [value + 40.0 for value in reference], OUTSIDE_BIAS)
    assert hidden.low is not None and hidden.low > 0
