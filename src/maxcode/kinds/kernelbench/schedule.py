"""Reference and candidate timed in one window: the shared plan of timed calls, the turns the
two workers take, and when to stop.

Both workers are alive together. The parent grants timed chunks in turn, reference chunk 0,
candidate chunk 0, reference chunk 1, ... on the same seeds (chunk n of both sides holds the
same inputs), and a worker waits on its descriptor 3 while the other one computes: a load that
starts during an evaluation hits both sides, and two workers never time each other's work.
Chunk n of the two sides is a pair, and the speedup is ``stats.chunk_pair_speedup`` of the
pairs: pairing cancels a load that drifts slower than a pair (tens of milliseconds).

When to stop (``Stopping``): after each pair, once at least ``MIN_PAIRS`` pairs and the
device's least number of calls ran, timing stops as soon as the interval lies within
``TARGET`` of the speedup, or when the calls or the seconds of the timing window reach
their cap. With a fixed number of trials (``--repeats``) exactly that many calls run.
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time
from dataclasses import dataclass, field

from maxcode.harness.stats import PairedEstimate, chunk_pair_speedup
from maxcode.kinds.kernelbench.outputs import CheckedOutputs, TimedOutputs
from maxcode.kinds.kernelbench.settings import (
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
    """How many timed calls per side: ``trials`` fixed, or adaptive between the bounds."""

    trials: int | None = None
    min_calls: int = 10
    max_calls: int = 1000
    budget_s: float = 2.0
    """Seconds of the timing window (both sides) after which timing stops (once ``min_pairs``
    and ``min_calls`` ran)."""
    min_pairs: int = MIN_PAIRS
    target: float = TARGET
    bar: float | None = None
    """A search's screen: timing stops once the speedup's interval lies wholly below this
    reward (the candidate cannot be kept; see ``cpp._rounds_still_needed``)."""

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
    """Calls per chunk: about ``CHUNK_S`` of calls, a side's turn (``span_s`` per call: the
    call, making its inputs, sending its outputs) of at most ``CHUNK_SPAN_S``, at most
    ``CHUNK`` and ``CHUNK_BYTES`` of inputs and outputs (``output_bytes``: both, per call,
    ``TimedPlan.call_bytes``), at least one; also few enough that the trials (fixed, or at
    most ``max_calls``) make ``min_pairs`` + 1 chunks (the first pair is a warm-up pair)."""
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
    """The timed calls of one evaluation, shared by the reference's run and the candidate's:
    the calls of each chunk (decided in turn by ``Schedule``), the seed of each call (drawn
    when first asked for), the calls whose outputs are kept (drawn once the reference's
    outputs of the chunk arrive, named to neither worker: both send every output)."""

    chunk: int = CHUNK
    """Calls per chunk (from the reference's warm-up)."""
    output_bytes: int = 0
    """Bytes of one call's outputs, as the reference reported them."""
    input_bytes: int = 0
    """Bytes of one call's inputs (a chunk holds them all, with its outputs)."""
    keep_all: bool = True
    """Every call's outputs are kept (they fit ``KEEP_BYTES``); else one call per chunk."""
    chunks: list[int] = field(default_factory=list)
    """Calls of each timed chunk (phase K), in order."""
    seeds: list[int] = field(default_factory=list)
    keep: set[int] = field(default_factory=set)
    """Kept positions of the chunks decided so far."""
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
        """The reference's warm-up sizes the chunks (on a call's time, the time of making its
        inputs, and the bytes of its inputs and outputs) and says whether all outputs fit."""
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
        """Bytes of one call's inputs and outputs (what bounds a chunk)."""
        return self.output_bytes + self.input_bytes

    @property
    def trials(self) -> int:
        return sum(self.chunks)

    def first(self, chunk: int) -> int:
        """Position of the first call of K chunk ``chunk``."""
        return sum(self.chunks[:chunk])

    def seeds_for(self, first: int, calls: int) -> list[int]:
        while len(self.seeds) < first + calls:
            self.seeds.append(self._draw.randrange(2**63))
        return self.seeds[first : first + calls]

    def keep_chunk(self, chunk: int) -> list[int]:
        """The kept positions of K chunk ``chunk`` (drawn the first time it is asked)."""
        first, calls = self.first(chunk), self.chunks[chunk]
        if chunk not in self._kept_chunks:
            if self.keep_all:
                self.keep.update(range(first, first + calls))
            elif self.kept_calls(chunk, calls):
                self.keep.add(first + self._draw.randrange(calls))
            self._kept_chunks.add(chunk)
        return [p for p in range(first, first + calls) if p in self.keep]

    def kept_calls(self, chunk: int, calls: int) -> int:
        """How many outputs K chunk ``chunk`` of ``calls`` calls will keep (which ones are
        drawn after the calls ran)."""
        if chunk in self._kept_chunks:
            first = self.first(chunk)
            return sum(1 for position in range(first, first + calls) if position in self.keep)
        if self.keep_all:
            return calls
        return int(len(self.keep) < max(SAMPLED_OUTPUTS, KEEP_BYTES // max(self.output_bytes, 1)))

    def positions(self) -> list[int]:
        """Every kept position, in order."""
        return sorted(self.keep)


class Schedule:
    """The turns of the two workers' timed chunks (see the module's docstring). Called from
    the two conversations' threads: ``grant`` blocks until the side may run its chunk and
    returns its calls (0: the phase is over for it); ``finish`` records a chunk's times;
    a side's next ``grant`` frees the floor it held; ``gone`` says a side's run ended, so the
    other never waits for it."""

    def __init__(self, plan: TimedPlan, stopping: Stopping, opened: bool = True) -> None:
        self.plan, self.stopping = plan, stopping
        self._opened = opened
        """No timed chunk before the parent opens the window (``open``): the parent's own
        start-up (its import of torch, which the conversations need) must not fall into it."""
        self._turn = threading.Condition()
        self._asked: set[Side] = set()
        self._gone: set[Side] = set()
        self._through: set[Side] = set()
        self._sized = False
        self._busy: Side | None = None
        self._finished = {Side.REFERENCE: 0, Side.CANDIDATE: 0}
        self._stopped = False
        self._phases: dict[Phase, list[int]] = {}
        self.times: dict[Side, list[list[float]]] = {Side.REFERENCE: [], Side.CANDIDATE: []}
        """Per-call seconds of each K chunk per side, as the workers reported them."""
        self.started_ns: int | None = None
        """When the first timed chunk was granted (the timing window opens)."""
        self.stopped_ns: int | None = None
        """When the last pair ended (the window closes)."""
        self.waited_ns = {Side.REFERENCE: 0, Side.CANDIDATE: 0}
        """Time each side spent waiting for its turn (blocked on its socket)."""
        self.order: list[tuple[Side, Phase, int]] = []
        """Every chunk granted, in order: (side, phase, chunk)."""
        self.kept = TimedOutputs()
        """The kept outputs of the timed calls of both sides, compared between chunks."""
        self.checked = CheckedOutputs()
        """The checked calls' outputs of both sides, compared as they come."""

    def grant(self, side: Side, phase: Phase, chunk: int) -> int:
        asked = time.perf_counter_ns()
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
            while True:
                calls = self._decide(side, phase, chunk)
                if calls is not None:
                    break
                self._turn.wait()
            if calls:
                self._busy = side
                self.order.append((side, phase, chunk))
                if self.started_ns is None:
                    self.started_ns = time.perf_counter_ns()
            self.waited_ns[side] += time.perf_counter_ns() - asked
            return calls

    def finish(self, side: Side, phase: Phase, times: list[float]) -> None:
        """A chunk's outputs arrived (the floor stays the side's until it asks again)."""
        with self._turn:
            if phase == Phase.PAIRS:
                self.times[side].append(list(times))
                self._finished[side] += 1
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
        seeds wait for it, so its checked tensors are always held to the reference's sizes
        (sent early, they would come before there is a bound)."""
        with self._turn:
            while not (self._sized or Side.REFERENCE in self._gone):
                self._turn.wait()

    def through(self, side: Side) -> None:
        """``side`` is through the phases the other must wait idle for (the reference: its
        pairs and its identity model)."""
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
        if side == Side.CANDIDATE:
            if chunk < len(self.plan.chunks) and self._finished[Side.REFERENCE] > chunk:
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
            if self._finished[Side.CANDIDATE] < chunk:
                return None
            elapsed = (time.perf_counter_ns() - (self.started_ns or 0)) / 1e9
            # Chunks sized on the reference's timed calls so far (a warm-up call, with its
            # first-touch page faults, can look several times slower than a timed one), and
            # on the window's seconds per call of either side so far (the sides take turns).
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
            sizes = [min(step, total - first) for first in range(0, total, step)]
            self._phases[phase] = sizes
        sizes = self._phases[phase]
        return sizes[chunk] if chunk < len(sizes) else 0

    def baseline_first(self, phase: Phase, chunk: int) -> int:
        """Position of the first call of chunk ``chunk`` of a baseline phase."""
        return sum(self._phases.get(phase, [])[:chunk])

    def estimate(self) -> PairedEstimate:
        with self._turn:
            return chunk_pair_speedup(self.times[Side.REFERENCE], self.times[Side.CANDIDATE])
