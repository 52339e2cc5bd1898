"""One round's timing window (``Round``): the plan of timed calls (``TimedPlan``), the turns
the two workers take (``Turns``), when to stop (``Stopping``), and the outputs compared as they
come (``outputs``). The parent grants timed chunks in turn, reference chunk n then candidate
chunk n on the same seeds, the other worker blocked: a load hits both sides, and a pair cancels
a load that drifts slower than it (tens of milliseconds).
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from maxcode.harness.stats import chunk_pair_speedup
from maxcode.kinds.kernelbench.outputs import CheckedOutputs, Comparer, TimedOutputs
from maxcode.kinds.kernelbench.parameters import (
    CHUNK,
    CHUNK_BYTES,
    CHUNK_S,
    CHUNK_SPAN_S,
    KEEP_BYTES,
    MIN_PAIRS,
    SAMPLED_OUTPUTS,
    TARGET,
)
from maxcode.kinds.kernelbench.worker.protocol import Phase, Side

OVERHEAD_CHUNKS = 4
"""Chunks of the identity model (``Phase.IDENTITY``, the harness's own cost per call) at most."""


@dataclass(frozen=True)
class Stopping:
    """How many timed calls per side: ``trials`` fixed, or adaptive between the bounds until
    ``min_pairs`` ran and the interval lies within ``target``, or at the budget."""

    trials: int | None = None
    min_calls: int = 10
    max_calls: int = 1000
    budget_s: float = 2.0
    min_pairs: int = MIN_PAIRS
    target: float = TARGET
    bar: float | None = None
    """A search's screen: stop once the interval lies wholly below this reward."""

    def next_calls(
        self,
        chunk: int,
        reference: list[list[float]],
        candidate: list[list[float]],
        elapsed_s: float,
    ) -> int:
        """Calls of the next chunk (0: stop), after the pairs so far."""
        done = sum(len(times) for times in reference)
        if self.trials is not None:
            return max(0, min(chunk, self.trials - done))
        if done >= self.max_calls:
            return 0
        calls = min(chunk, self.max_calls - done)
        if len(candidate) < self.min_pairs or done < self.min_calls:
            return calls
        if elapsed_s >= self.budget_s:
            return 0
        interval = chunk_pair_speedup(reference, candidate)
        below = self.bar is not None and interval.high is not None and interval.high < self.bar
        if interval.narrow(self.target) or below:
            return 0
        return calls


def chunk_calls(
    estimate_s: float,
    trials: int | None,
    output_bytes: int = 0,
    max_calls: int = 0,
    min_pairs: int = MIN_PAIRS,
    span_s: float = 0.0,
) -> int:
    """Calls per chunk: about ``CHUNK_S`` of calls, a turn (``span_s`` per call) of at most
    ``CHUNK_SPAN_S``, at most ``CHUNK`` and ``CHUNK_BYTES`` (``output_bytes``: inputs and
    outputs per call), at least one; few enough that the trials make ``min_pairs`` + 1 chunks."""
    calls = CHUNK if estimate_s <= 0 else round(CHUNK_S / estimate_s)
    if span_s > 0:
        calls = min(calls, round(CHUNK_SPAN_S / span_s))
    calls = min(calls, CHUNK, CHUNK_BYTES // max(output_bytes, 1))
    most = trials or max_calls
    if most:
        calls = min(calls, most // (min_pairs + 1))
    return max(1, calls)


@dataclass
class TimedPlan:
    """The timed calls of one round, shared by both sides: the calls of each chunk (``Turns``
    decides), each call's seed (drawn when first asked for), the calls whose outputs are kept
    (drawn after the chunk ran, named to neither worker: both send every output)."""

    chunk: int = CHUNK
    """Calls per chunk (sized by the reference's warm-up)."""
    output_bytes: int = 0
    input_bytes: int = 0
    """Bytes of one call's outputs and inputs, as the reference reported them."""
    keep_all: bool = True
    """Every call's outputs are kept (they fit ``KEEP_BYTES``); else one call per chunk."""
    chunks: list[int] = field(default_factory=list)
    """Calls of each timed chunk (phase K), in order."""
    seeds: list[int] = field(default_factory=list)
    keep: set[int] = field(default_factory=set)
    _kept_chunks: set[int] = field(default_factory=set)
    _draw: secrets.SystemRandom = field(default_factory=secrets.SystemRandom)

    def decide(
        self,
        estimate_s: float,
        output_bytes: int,
        stopping: Stopping,
        input_bytes: int = 0,
        inputs_s: float = 0.0,
    ) -> None:
        """The reference's warm-up sizes the chunks and says whether all outputs fit."""
        self.output_bytes, self.input_bytes = output_bytes, input_bytes
        self.chunk = chunk_calls(
            estimate_s,
            stopping.trials,
            self.call_bytes,
            stopping.max_calls,
            stopping.min_pairs,
            span_s=estimate_s + inputs_s if inputs_s > 0 else 0.0,
        )
        most = stopping.trials or stopping.max_calls
        self.keep_all = output_bytes * most <= KEEP_BYTES

    @property
    def call_bytes(self) -> int:
        return self.output_bytes + self.input_bytes

    @property
    def trials(self) -> int:
        return sum(self.chunks)

    def first(self, chunk: int) -> int:
        return sum(self.chunks[:chunk])

    def seeds_for(self, first: int, calls: int) -> list[int]:
        while len(self.seeds) < first + calls:
            self.seeds.append(self._draw.randrange(2**63))
        return self.seeds[first : first + calls]

    def keep_chunk(self, chunk: int) -> list[int]:
        """The kept positions of K chunk ``chunk`` (drawn when first asked)."""
        first, calls = self.first(chunk), self.chunks[chunk]
        if chunk not in self._kept_chunks:
            if self.keep_all:
                self.keep.update(range(first, first + calls))
            elif len(self.keep) < max(SAMPLED_OUTPUTS, KEEP_BYTES // max(self.output_bytes, 1)):
                self.keep.add(first + self._draw.randrange(calls))  # one call, drawn now
            self._kept_chunks.add(chunk)
        return [p for p in range(first, first + calls) if p in self.keep]

    def positions(self) -> list[int]:
        return sorted(self.keep)


class Turns:
    """The turns of the two workers' timed chunks, called from their conversations' threads:
    ``grant`` blocks until the side may run its chunk and returns its calls (0: the phase is
    over for it), and the side's next ``grant`` frees the floor; ``finish`` records a chunk's
    times; ``gone`` says a side's run ended, so the other never waits for it."""

    def __init__(self, plan: TimedPlan, stopping: Stopping, opened: bool = True) -> None:
        self.plan, self.stopping = plan, stopping
        self._opened = opened
        """No timed chunk before ``open``: the parent's import of torch must not fall in it."""
        self._turn = threading.Condition()
        self._asked: set[Side] = set()
        self._gone: set[Side] = set()
        self._through: set[Side] = set()
        self._sized = False
        self._busy: Side | None = None
        self._stopped = False
        self._phases: dict[Phase, list[int]] = {}
        self.times: dict[Side, list[list[float]]] = {Side.REFERENCE: [], Side.CANDIDATE: []}
        """Per-call seconds of each K chunk per side, as the workers claim them."""
        self.before_timing: Callable[[], None] = lambda: None
        """Called once, by the first chunk's side before it is granted: waits for the timing
        CPU's turn (evaluator ``_run_both``)."""
        self.due_ns: int | None = None
        self.started_ns: int | None = None
        self.stopped_ns: int | None = None
        """When the first chunk was due, when it was granted (``before_timing`` done), and
        when the last pair ended."""
        self.order: list[tuple[Side, Phase, int]] = []
        """Every chunk granted, in order: (side, phase, chunk)."""

    def grant(self, side: Side, phase: Phase, chunk: int) -> int:
        with self._turn:
            if self._busy == side:
                # Asking again, the side is about to block on its descriptor: only now is the
                # floor free (its last chunk's tail, freeing outputs, never overlaps the other
                # side's chunk on the shared CPU).
                self._busy = None
                self._turn.notify_all()
            if phase == Phase.PAIRS and chunk == 0:
                self._asked.add(side)
                self._turn.notify_all()
            while (calls := self._decide(side, phase, chunk)) is None:
                self._turn.wait()
            if not calls:
                return 0
            self._busy = side  # the floor is this side's: no other chunk starts meanwhile
            self.order.append((side, phase, chunk))
            first = self.started_ns is None and self.due_ns is None
            if first:
                self.due_ns = time.perf_counter_ns()
        if first:
            # Outside the lock: the other side's conversation goes on (it is told "gone").
            self.before_timing()
            with self._turn:
                self.started_ns = time.perf_counter_ns()
        return calls

    def finish(self, side: Side, phase: Phase, times: list[float]) -> None:
        """A chunk's outputs arrived (the floor stays the side's until it asks again)."""
        with self._turn:
            if phase == Phase.PAIRS:
                self.times[side].append(list(times))
            self._turn.notify_all()

    def open(self) -> None:
        with self._turn:
            self._opened = True
            self._turn.notify_all()

    def sized(self) -> None:
        """The reference's warm-up sized the plan (its outputs' and inputs' bytes are known)."""
        with self._turn:
            self._sized = True
            self._turn.notify_all()

    def wait_sized(self) -> None:
        """Blocks until the plan is sized or the reference's run ended: the candidate's check
        seeds wait for it, so its checked tensors are held to the reference's sizes."""
        with self._turn:
            while not (self._sized or Side.REFERENCE in self._gone):
                self._turn.wait()

    def through(self, side: Side) -> None:
        """``side`` is through the phases the other must wait idle for."""
        with self._turn:
            self._through.add(side)
            self._turn.notify_all()

    def gone(self, side: Side) -> None:
        with self._turn:
            self._gone.add(side)
            if self._busy == side:
                self._busy = None
            self._turn.notify_all()

    def _decide(self, side: Side, phase: Phase, chunk: int) -> int | None:
        """Calls of the chunk, 0 when the phase is over, None while the side must wait."""
        if side in self._gone:
            return 0
        other = Side.CANDIDATE if side == Side.REFERENCE else Side.REFERENCE
        if self._busy is not None:
            return None
        if phase != Phase.PAIRS:
            # The reference's baselines (identity model, torch.compile): after the pairs.
            if not (self._stopped or other in self._gone):
                return None
            return self._baseline(phase, chunk)
        pairs_done = {name: len(times) for name, times in self.times.items()}
        if side == Side.CANDIDATE:
            if chunk < len(self.plan.chunks) and pairs_done[Side.REFERENCE] > chunk:
                return self.plan.chunks[chunk]
            # Told to stop only once the reference's baselines ran: until then the candidate
            # waits, idle, and cannot disturb them.
            if Side.REFERENCE in self._gone or (self._stopped and Side.REFERENCE in self._through):
                return 0
            return None
        if other in self._gone or self._stopped:
            return self._stop()
        if chunk == 0:
            if Side.CANDIDATE not in self._asked or not self._opened:
                return None
            calls = self.stopping.next_calls(self.plan.chunk, [], [], 0.0)
        else:
            if pairs_done[Side.CANDIDATE] < chunk:
                return None
            elapsed = (time.perf_counter_ns() - (self.started_ns or 0)) / 1e9
            # Sized on the reference's timed calls (a warm-up call, with its first-touch page
            # faults, can look several times slower) and the window's seconds per call so far.
            timed = [value for times in self.times[Side.REFERENCE] for value in times]
            made = len(timed) + sum(len(times) for times in self.times[Side.CANDIDATE])
            self.plan.chunk = chunk_calls(
                statistics.median(timed),
                self.stopping.trials,
                self.plan.call_bytes,
                self.stopping.max_calls,
                self.stopping.min_pairs,
                span_s=elapsed / made if made else 0.0,
            )
            calls = self.stopping.next_calls(
                self.plan.chunk, self.times[Side.REFERENCE], self.times[Side.CANDIDATE], elapsed
            )
        if not calls:
            return self._stop()
        self.plan.chunks.append(calls)
        return calls

    def _stop(self) -> int:
        if not self._stopped:
            self._stopped = True
            self.stopped_ns = time.perf_counter_ns()
            self._turn.notify_all()
        return 0

    def _baseline(self, phase: Phase, chunk: int) -> int:
        if phase not in self._phases:
            total = self.plan.trials
            if phase == Phase.IDENTITY:
                total = min(total, OVERHEAD_CHUNKS * self.plan.chunk)
            step = self.plan.chunk
            self._phases[phase] = [min(step, total - first) for first in range(0, total, step)]
        sizes = self._phases[phase]
        return sizes[chunk] if chunk < len(sizes) else 0

    def baseline_first(self, phase: Phase, chunk: int) -> int:
        return sum(self._phases.get(phase, [])[:chunk])


class Round:
    """One round's timing window, shared by its two conversations (``listener``)."""

    def __init__(self, plan: TimedPlan, stopping: Stopping, opened: bool = True) -> None:
        self.plan = plan
        self.turns = Turns(plan, stopping, opened)
        self.checked = CheckedOutputs()
        self.kept = TimedOutputs()

    def compare_with(self, comparer: Comparer) -> None:
        self.kept.compare_with(comparer)
        self.checked.compare_with(comparer)

    def release(self) -> None:
        """After the judgement: the outputs still held go."""
        self.checked.close()
        self.kept.close()
