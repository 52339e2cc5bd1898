"""The KernelBench timing schedule without workers: when timing stops, and the turns two sides
take (threads standing in for the two workers)."""

from __future__ import annotations

import threading
import time

from maxcode.kinds.kernelbench.schedule import (
    Stopping,
    TimedPlan,
    Turns,
    chunk_calls,
)
from maxcode.kinds.kernelbench.worker.protocol import Phase, Side


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
    schedule = Turns(plan, Stopping(trials=1500, min_pairs=1))
    errors: list[str] = []
    # Each side's first turn: 750 calls of 20 us in 0.2 s or more.
    _take_turns(schedule, [], [], errors, call_s=0.00002, first_turn_s=0.2)
    assert not errors
    # After the first pair, 1500 calls in at least 0.4 s: a turn of 0.05 s holds 188 at most
    # (the later turns, instant here, bring the window's seconds per call down again).
    assert plan.chunks[0] == 750 and 1 <= plan.chunks[1] <= 188
    assert plan.trials == 1500


def _side(
    schedule: Turns,
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
    while calls := schedule.grant(side, Phase.PAIRS, chunk):
        running.append(1)
        if len(running) > 1:
            errors.append(f"{side} chunk {chunk} ran beside the other side")
        order.append(f"{side[0]}{chunk}")
        if chunk == 0:
            time.sleep(first_turn_s)
        running.pop()
        schedule.finish(side, Phase.PAIRS, [call_s] * calls)
        chunk += 1
    if side == Side.REFERENCE:
        chunk = 0
        while calls := schedule.grant(side, "O", chunk):
            order.append("O")
            schedule.finish(side, "O", [1.0] * calls)
            chunk += 1
        schedule.through(side)  # the candidate is told to stop only now
    else:
        order.append("candidate stopped")


def _take_turns(
    schedule: Turns,
    order: list[str],
    running: list[int],
    errors: list[str],
    **timing: float,
) -> None:
    """Both sides' threads (``_side``), the candidate asking first (it waits), to the end."""
    threads = [
        threading.Thread(target=_side, args=(schedule, side, order, running, errors), kwargs=timing)
        for side in (Side.CANDIDATE, Side.REFERENCE)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)


def test_two_sides_take_turns_chunk_by_chunk_and_never_run_together() -> None:
    plan = TimedPlan()
    plan.decide(0.001, 4, Stopping(trials=40))
    schedule = Turns(plan, Stopping(trials=40))
    order: list[str] = []
    errors: list[str] = []
    _take_turns(schedule, order, [], errors)
    assert not errors
    timed = order[:20]
    assert timed == [f"{side}{n}" for n in range(10) for side in ("r", "c")]
    assert plan.chunks == [4] * 10 and plan.trials == 40  # a ninth of the calls, at most
    assert len(schedule.times[Side.REFERENCE]) == len(schedule.times[Side.CANDIDATE]) == 10
    # The identity model's chunks, while the candidate waits idle; then it is let go.
    assert order[20:] == ["O"] * 4 + ["candidate stopped"]
    assert schedule.started_ns is not None and schedule.stopped_ns is not None


def test_a_side_that_is_gone_never_holds_the_other_back() -> None:
    plan = TimedPlan()
    plan.decide(0.001, 4, Stopping())
    schedule = Turns(plan, Stopping())
    schedule.gone(Side.CANDIDATE)
    assert schedule.grant(Side.REFERENCE, Phase.PAIRS, 0) == 0  # no pair to time: the phase is over
    assert (
        schedule.grant(Side.REFERENCE, Phase.IDENTITY, 0) == 0
    )  # no timed calls, no baseline to net
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
    from maxcode.kinds.kernelbench.worker.timing import CHUNK_PAD_BYTES, PAGE, chunk_pad_bytes

    plan = TimedPlan()
    plan.chunks += [4] * 400
    reference = [plan.seeds_for(plan.first(c), 4)[0] for c in range(400)]
    candidate = [plan.seeds_for(plan.first(c), 4)[0] for c in range(400)]
    assert candidate == reference
    pads = [chunk_pad_bytes(seed) for seed in reference]
    assert pads == [chunk_pad_bytes(seed) for seed in candidate]
    assert all(pad % PAGE == 0 and 0 <= pad < CHUNK_PAD_BYTES for pad in pads)
    assert len(set(pads)) > 300  # 2,048 possible pads: drawn anew per chunk
    quarters = {4 * pad // CHUNK_PAD_BYTES for pad in pads}
    assert quarters == {0, 1, 2, 3}  # the whole range, not a corner of it
