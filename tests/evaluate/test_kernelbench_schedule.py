"""The KernelBench timing schedule without workers: the paired estimate and its interval, when
timing stops, and the turns two sides take (threads standing in for the two workers)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from maxcode.evaluate.kernelbench.schedule import (
    CANDIDATE,
    REFERENCE,
    Schedule,
    Stopping,
    TimedPlan,
    chunk_calls,
    paired_excess,
    paired_speedup,
    t_quantile,
)
from maxcode.evaluate.kernelbench.settings import OUTSIDE_BIAS


def test_the_paired_estimate_is_a_geometric_mean_of_chunk_mean_ratios() -> None:
    reference = [[2.0, 2.0, 8.0], [4.0, 4.0, 4.0]]
    candidate = [[1.0, 1.0, 1.0], [1.0, 4.0, 1.0]]
    estimate = paired_speedup(reference, candidate)
    assert estimate.pairs == 2
    assert estimate.speedup == pytest.approx(math.sqrt((12.0 / 3.0) * (12.0 / 6.0)))
    assert estimate.low is not None and estimate.high is not None
    assert estimate.low < estimate.speedup < estimate.high


def test_work_moved_between_the_calls_of_a_chunk_moves_nothing() -> None:
    """A chunk's inputs all exist before its first call: a candidate can do the whole chunk's
    work in that call and look up the rest (``look_ahead.py``). The chunk counts whole."""
    reference = [[1.0] * 8] * 6
    spread = paired_speedup(reference, [[1.0] * 8] * 6)
    ahead = paired_speedup(reference, [[8.0] + [1e-6] * 7] * 6)
    assert ahead.speedup == pytest.approx(spread.speedup, rel=1e-5) == pytest.approx(1.0, rel=1e-5)


def test_equal_ratios_give_a_point_interval_and_one_pair_none() -> None:
    same = paired_speedup([[1.0]] * 5, [[0.5]] * 5)
    assert same.speedup == pytest.approx(2.0)
    assert same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    assert same.narrow()
    one = paired_speedup([[1.0]], [[1.0]])
    assert one.low is None and one.high is None and not one.narrow()
    assert paired_speedup([], []).pairs == 0


def test_a_process_bias_widens_the_interval_in_quadrature_but_not_the_stopping() -> None:
    same = paired_speedup([[1.0]] * 5, [[0.5]] * 5)  # pairs alone: a point interval at 2x
    wide = same.with_process_bias(0.015)
    assert wide.speedup == same.speedup and wide.pairs == same.pairs
    assert wide.low == pytest.approx(2.0 * math.exp(-1.959964 * 0.015))
    assert wide.high == pytest.approx(2.0 * math.exp(1.959964 * 0.015))
    assert same.narrow() and not wide.narrow(0.02)  # +-2.9%: timing stops on the pairs' width
    noisy = paired_speedup([[5.0], [1.0], [1.1], [0.9], [1.05]], [[1.0]] * 5)
    assert noisy.low is not None and noisy.high is not None
    half = math.log(noisy.high / noisy.low) / 2
    widened = noisy.with_process_bias(0.015)
    assert widened.low is not None and widened.high is not None
    assert math.log(widened.high / widened.low) / 2 == pytest.approx(
        math.hypot(half, 1.959964 * 0.015)
    )
    assert paired_speedup([[1.0]], [[1.0]]).with_process_bias(0.015).low is None


def test_a_pair_hit_on_one_side_only_barely_moves_the_trimmed_estimate() -> None:
    steady = [[1.0]] * 10
    hit = paired_speedup([[1.0]] * 9 + [[3.0]], steady)  # one pair 3x off
    assert hit.pairs == 9  # the first pair warms up
    assert hit.speedup == pytest.approx(1.0)
    assert hit.low is not None and hit.high is not None and hit.low <= 1.0 <= hit.high


def test_the_interval_is_a_t_interval_on_the_log_ratios() -> None:
    ratios = [1.0, 1.1, 0.9, 1.05]
    # A first (warm-up) pair far off is left out: the estimate is the other four's.
    estimate = paired_speedup([[5.0]] + [[r] for r in ratios], [[1.0]] * 5)
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


def test_fixed_trials_are_exactly_that_many_calls() -> None:
    stopping = Stopping(trials=20)
    done: list[list[float]] = []
    while calls := stopping.next_calls(8, done, done, 0.0):
        done.append([1.0] * calls)
    assert [len(chunk) for chunk in done] == [8, 8, 4]


def test_adaptive_timing_stops_on_a_narrow_interval_the_budget_or_the_cap() -> None:
    stopping = Stopping(min_calls=10, max_calls=100, budget_s=2.0, min_pairs=4)
    steady = [[1.0] * 8] * 3
    # Too few pairs: on, whatever the interval says.
    assert stopping.next_calls(8, steady, steady, 0.0) == 8
    steady = [[1.0] * 8] * 4
    assert stopping.next_calls(8, steady, steady, 0.0) == 0  # equal ratios: narrow
    noisy_reference = [[1.0] * 8, [2.0] * 8, [1.0] * 8, [2.0] * 8]
    assert stopping.next_calls(8, noisy_reference, steady, 0.5) == 8
    assert stopping.next_calls(8, noisy_reference, steady, 2.5) == 0  # the window's cap
    many = [[1.0] * 8] * 12 + [[1.0] * 4]
    noisy = [[1.0] * 8, [2.0] * 8] * 6 + [[1.0] * 4]
    assert stopping.next_calls(8, noisy, many, 0.1) == 0  # 100 calls: the cap
    assert chunk_calls(0.00001, None) == 1024 and chunk_calls(0.001, None) == 15
    assert chunk_calls(0.00001, None, max_calls=1000) == 111  # nine chunks at least
    assert chunk_calls(0.5, None) == 1 and chunk_calls(0.005, None) == 3
    assert chunk_calls(0.0001, None, output_bytes=16 << 20) == 4  # inputs held per chunk
    # Fixed trials: enough chunks for a warm-up pair and eight more.
    assert chunk_calls(0.00001, 24) == 2 and chunk_calls(0.5, 3) == 1 and chunk_calls(0.5, 20) == 1


def test_a_sides_turn_is_bounded_with_the_making_of_its_inputs() -> None:
    """Tiny calls with inputs slow to make: ``CHUNK_S`` of calls alone made turns of 0.6 s a
    side. The bound counts a call's whole share of a turn: first from the reference's warm-up
    (its call and the making of its inputs), then from the window's seconds per call."""
    assert chunk_calls(0.00002, None, max_calls=20_000) == 750
    assert chunk_calls(0.00002, None, max_calls=20_000, span_s=0.0002) == 250
    assert chunk_calls(0.001, None, span_s=0.0011) == 15  # a short turn: CHUNK_S decides
    assert chunk_calls(0.005, None, span_s=0.08) == 1  # at least one call
    plan = TimedPlan()
    plan.decide(0.00002, 4, Stopping(max_calls=20_000), inputs_s=0.00018)
    assert plan.chunk == 250
    plan.decide(0.00002, 4, Stopping(max_calls=20_000))  # no making time reported
    assert plan.chunk == 750

    plan = TimedPlan()
    plan.decide(0.00002, 4, Stopping(trials=1500, min_pairs=1))
    schedule = Schedule(plan, Stopping(trials=1500, min_pairs=1))
    errors: list[str] = []
    # Each side's first turn: 750 calls of 20 us in 0.2 s or more.
    _take_turns(schedule, [], [], errors, call_s=0.00002, first_turn_s=0.2)
    assert not errors
    # After the first pair, 1500 calls in at least 0.4 s: a turn of 0.05 s holds 188 at most
    # (the later turns, instant here, bring the window's seconds per call down again).
    assert plan.chunks[0] == 750 and 1 <= plan.chunks[1] <= 188
    assert plan.trials == 1500


def _side(
    schedule: Schedule,
    side: str,
    order: list[str],
    running: list[int],
    errors: list[str],
    call_s: float = 0.001,
    first_turn_s: float = 0.0,
) -> None:
    """One side's turns, each call reported as ``call_s``; the first turn lasts
    ``first_turn_s`` at least."""
    chunk = 0
    while calls := schedule.grant(side, "K", chunk):
        running.append(1)
        if len(running) > 1:
            errors.append(f"{side} chunk {chunk} ran beside the other side")
        order.append(f"{side[0]}{chunk}")
        if chunk == 0:
            time.sleep(first_turn_s)
        running.pop()
        schedule.finish(side, "K", [call_s] * calls)
        chunk += 1
    if side == REFERENCE:
        chunk = 0
        while calls := schedule.grant(side, "O", chunk):
            order.append("O")
            schedule.finish(side, "O", [1.0] * calls)
            chunk += 1
        schedule.through(side)  # the candidate is told to stop only now
    else:
        order.append("candidate stopped")


def _take_turns(
    schedule: Schedule,
    order: list[str],
    running: list[int],
    errors: list[str],
    **timing: float,
) -> None:
    """Both sides' threads (``_side``), the candidate asking first (it waits), to the end."""
    threads = [
        threading.Thread(target=_side, args=(schedule, side, order, running, errors), kwargs=timing)
        for side in (CANDIDATE, REFERENCE)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)


def test_two_sides_take_turns_chunk_by_chunk_and_never_run_together() -> None:
    plan = TimedPlan()
    plan.decide(0.001, 4, Stopping(trials=40))
    schedule = Schedule(plan, Stopping(trials=40))
    order: list[str] = []
    errors: list[str] = []
    _take_turns(schedule, order, [], errors)
    assert not errors
    timed = order[:20]
    assert timed == [f"{side}{n}" for n in range(10) for side in ("r", "c")]
    assert plan.chunks == [4] * 10 and plan.trials == 40  # a ninth of the calls, at most
    assert len(schedule.times[REFERENCE]) == len(schedule.times[CANDIDATE]) == 10
    # The identity model's chunks, while the candidate waits idle; then it is let go.
    assert order[20:] == ["O"] * 4 + ["candidate stopped"]
    assert schedule.started_ns is not None and schedule.stopped_ns is not None


def test_a_side_that_is_gone_never_holds_the_other_back() -> None:
    plan = TimedPlan()
    plan.decide(0.001, 4, Stopping())
    schedule = Schedule(plan, Stopping())
    schedule.gone(CANDIDATE)
    assert schedule.grant(REFERENCE, "K", 0) == 0  # no pair to time: the phase is over
    assert schedule.grant(REFERENCE, "O", 0) == 0  # no timed calls, no baseline to net
    assert plan.chunks == []


def test_outputs_kept_are_drawn_once_per_chunk_and_shared_by_both_sides() -> None:
    plan = TimedPlan()
    plan.decide(0.001, 1 << 30, Stopping(trials=16))  # too big to keep every call's outputs
    assert not plan.keep_all
    plan.chunks += [8, 8]
    first = plan.keep_chunk(0)
    assert len(first) == 1 and plan.keep_chunk(0) == first
    assert len(plan.keep_chunk(1)) == 1 and plan.positions() == sorted(plan.keep)
    small = TimedPlan()
    small.decide(0.001, 16, Stopping(trials=8))
    small.chunks.append(8)
    assert small.keep_chunk(0) == list(range(8))


def test_each_chunk_pads_its_buffers_by_a_draw_both_sides_make_alike() -> None:
    """A CPU chunk's buffers are shifted by a pad drawn from the chunk's first seed (worker
    ``chunk_pad_bytes``): both sides are sent the same seeds for a chunk, so they pad it alike,
    by whole pages below ``CHUNK_PAD_BYTES`` (which the reserve holds on top of a chunk), and
    the pads differ from chunk to chunk."""
    from maxcode.evaluate.kernelbench.worker import _PAGE, CHUNK_PAD_BYTES, chunk_pad_bytes

    plan = TimedPlan()
    plan.chunks += [4] * 400
    reference = [plan.seeds_for(plan.first(c), 4)[0] for c in range(400)]
    candidate = [plan.seeds_for(plan.first(c), 4)[0] for c in range(400)]
    assert candidate == reference
    pads = [chunk_pad_bytes(seed) for seed in reference]
    assert pads == [chunk_pad_bytes(seed) for seed in candidate]
    assert all(pad % _PAGE == 0 and 0 <= pad < CHUNK_PAD_BYTES for pad in pads)
    assert len(set(pads)) > 300  # 2,048 possible pads: drawn anew per chunk
    quarters = {4 * pad // CHUNK_PAD_BYTES for pad in pads}
    assert quarters == {0, 1, 2, 3}  # the whole range, not a corner of it


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
