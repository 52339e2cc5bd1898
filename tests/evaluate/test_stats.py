"""The paired speedup interval (maxcode.evaluate.stats): pure arithmetic, no timing."""

from __future__ import annotations

import math
import random

import pytest

from maxcode.evaluate.stats import exact, median_rank, paired_speedup, ratio_interval


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
