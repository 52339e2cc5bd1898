"""The parent's end of a worker's descriptor 3 (``Conversation``, a thread per run): seeds sent
just in time (the check seeds once the model is warm, each chunk's on the worker's turn; which
timed outputs are checked, never), every message stamped by the parent's clock and the worker's
CPU clock, tensors taken as sealed memory files (``outputs``). The order is the worker
package's; a message out of order, malformed or too long ends it (``problem``). Turns, plan and
comparisons are the ``schedule.Round``'s; a phase is read back as ``StampedChunks``.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from maxcode.kinds.kernelbench.cpuclock import (
    HugePages,
    find_worker,
    huge_pages,
    others_ns,
    pin,
    pinned,
    process_cpu_ns,
    running,
)
from maxcode.kinds.kernelbench.evidence import (
    AnyMessage,
    Checked,
    End,
    Loaded,
    Marker,
    Next,
    Outputs,
    Ready,
    first_line,
    parse_message,
)
from maxcode.kinds.kernelbench.outputs import KEYS, SealedFiles
from maxcode.kinds.kernelbench.parameters import CHECK_SEEDS
from maxcode.kinds.kernelbench.worker.protocol import MOST_FILES, Part, Phase, Side

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.schedule import Round

_LINE_BYTES = 1 << 20
_JOIN_S = 10.0
SETTLE_S = 0.02
"""The longest the parent waits for a worker that sent ``next`` or ``begin`` to block."""
_SETTLE_POLL_S = 20e-6


Clock = Literal["host", "cpu"]
"""The parent's clock, or the worker's CPU clock read by the parent (``cpuclock``)."""
_STAMPS = ("sent", "begin", "end", "done")


@dataclass
class Chunk:
    """One chunk of timed calls as the parent saw it, with its four stamps by both clocks (ns):
    ``sent`` (its seeds: its inputs cannot exist before), ``begin`` and ``end`` (the markers),
    ``done`` (the next chunk asked for: outputs sent, memory freed)."""

    calls: int
    first: int
    """Position of the chunk's first call (its seeds are the plan's from there)."""
    host: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, int | None] = field(default_factory=dict)
    """Read while the worker waits for the parent (while it runs, the clock lags a tick)."""
    times: list[float] = field(default_factory=list)
    """The calls' in-process seconds, as the worker claims them."""


@dataclass(frozen=True)
class StampedChunks:
    """One side's timed chunks of one phase, raw, with what the judge asks derived on demand;
    what needs the stamps is None unless the phase is ``complete`` (every chunk stamped) and the
    clock asked for was read."""

    chunks: list[Chunk]
    complete: bool
    waiting_cpu_ns: int | None = None
    """The worker's CPU time while it waited for its turns (an honest one is blocked)."""

    @property
    def chunk_times(self) -> list[list[float]]:
        return [chunk.times for chunk in self.chunks]

    @property
    def times(self) -> list[float]:
        return [value for chunk in self.chunks for value in chunk.times]

    @property
    def waiting_cpu_s(self) -> float | None:
        if not self.complete or self.waiting_cpu_ns is None:
            return None
        return self.waiting_cpu_ns / 1e9

    def rates(self, clock: Clock) -> list[float] | None:
        """Seconds per call between each chunk's markers by ``clock`` (on a GPU, the parent's
        is the device's: the worker waits for the whole device before its end marker)."""
        stamps = self._stamps(clock, ("begin", "end"))
        if stamps is None:
            return None
        return [
            max(end - begin, 0) / 1e9 / max(chunk.calls, 1)
            for chunk, (begin, end) in zip(self.chunks, stamps)
        ]

    def per_call(self) -> float | None:
        """Host seconds per call, the median over the chunks."""
        rates = self.rates("host")
        return statistics.median(rates) if rates else None

    def least_per_call(self) -> float | None:
        """The least host seconds per call over the chunks (the parent's stamping delays are
        not the harness's own cost)."""
        rates = self.rates("host")
        return min(rates) if rates else None

    def outside(self, clock: Clock) -> dict[Part, list[float]] | None:
        """Seconds per call of each chunk that its claims do not account for, by ``Part`` (kept
        apart so the quiet parts are not drowned in the noisy one)."""
        split = self._split(clock)
        if split is None:
            return None
        calls = [max(chunk.calls, 1) for chunk in self.chunks]
        return {part: [seconds[part] / n for seconds, n in zip(split, calls)] for part in Part}

    def spent(self) -> dict[str, float] | None:
        """Seconds by part, summed over the chunks: ``calls`` (the claims) and each ``Part`` by
        host time."""
        split = self._split("host")
        if split is None:
            return None
        parts: dict[str, float] = {part: sum(seconds[part] for seconds in split) for part in Part}
        return {"calls": sum(self.times), **parts}

    def span_cpu(self) -> tuple[float, float] | None:
        """(CPU seconds, host seconds) of the worker from each chunk's seeds to its end, summed
        (the CPU readings fall inside the host stamps)."""
        cpu, host = self._stamps("cpu", ("sent", "done")), self._stamps("host", ("sent", "done"))
        if cpu is None or host is None:
            return None
        return sum(done - sent for sent, done in cpu) / 1e9, sum(d - s for s, d in host) / 1e9

    def _stamps(self, clock: Clock, names: tuple[str, ...]) -> list[tuple[int, ...]] | None:
        if not self.complete:
            return None
        found = []
        for chunk in self.chunks:
            stamps = [(chunk.host if clock == "host" else chunk.cpu).get(name) for name in names]
            if any(stamp is None for stamp in stamps):
                return None
            found.append(tuple(int(stamp or 0) for stamp in stamps))
        return found

    def _split(self, clock: Clock) -> list[dict[Part, float]] | None:
        stamps = self._stamps(clock, _STAMPS)
        if stamps is None:
            return None
        return [
            {
                Part.MAKING: (begin - sent) / 1e9,
                Part.BETWEEN: (end - begin) / 1e9 - sum(chunk.times),
                Part.SENDING: (done - end) / 1e9,
            }
            for chunk, (sent, begin, end, done) in zip(self.chunks, stamps)
        ]


class Conversation:
    """The parent's end of one worker run's descriptor 3 (see the module's docstring)."""

    def __init__(
        self,
        round: Round,
        side: Side,
        check_seeds: list[int],
        phases: tuple[Phase, ...],
        cpu: int | None = None,
    ) -> None:
        self.round, self.side, self.check_seeds, self.phases = round, side, check_seeds, phases
        self.cpu = cpu
        """The timing CPU the worker's timed chunks must run on alone (None: not pinned)."""
        self.strayed = 0
        """Timed chunks at whose end a thread of the worker could run on another CPU."""
        self.home: int | None = None
        """The one CPU the worker does the task's work on until its first timed chunk, where
        the parent moves it once torch is loaded (None: where it started): ``cpu`` when the
        round holds the timing CPU's turn, else the CPU it waits on."""
        self._loaded_once = False
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ready_at: int | None = None
        self.chunks: dict[tuple[Phase, int], Chunk] = {}
        self.problem: str | None = None
        """Why the conversation was ended (None: it followed the protocol)."""
        self.waited_ns = 0
        self.received_bytes = 0
        self._root: int | None = None
        self._forked = False
        self.processes: tuple[int, int] | None = None
        """The run's init and worker (host pids), found when the worker is ready."""
        self.others: list[int] = []
        """CPU ns of the candidate run's other processes when its timed calls began and ended."""
        self.huge_pages: HugePages | None = None
        self._done: list[Phase] = []
        self._current: tuple[Phase, int, str] | None = None
        self._waiting_ns: dict[Phase, int | None] = {}
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def started(self, pid: int, forked: bool = False) -> None:
        """The sandbox started the run as ``pid`` (``forked``: a zygote's fork)."""
        self._root = pid
        self._forked = forked

    @property
    def worker_fd(self) -> int:
        return self._theirs.fileno()

    def close(self) -> None:
        """After the run: drop the worker's end, wait for the conversation to end."""
        self.round.turns.gone(self.side)
        self._theirs.close()
        self._thread.join(timeout=_JOIN_S)
        if self._thread.is_alive():
            self.problem = self.problem or "the conversation did not end with the run"
            self._ours.shutdown(socket.SHUT_RDWR)
            self._thread.join(timeout=_JOIN_S)
        self._ours.close()

    @property
    def checked(self) -> bool:
        return self.round.checked.arrived(self.side == Side.REFERENCE) == CHECK_SEEDS

    def measured(self, phase: Phase) -> StampedChunks:
        chunks = [chunk for (name, _), chunk in sorted(self.chunks.items()) if name == phase]
        complete = phase in self._done and all(
            all(name in chunk.host for name in _STAMPS) for chunk in chunks
        )
        return StampedChunks(chunks, complete, self._waiting_ns.get(phase))

    def others_s(self) -> float | None:
        """CPU seconds the run's other processes spent while the calls were timed."""
        if len(self.others) != 2:
            return None
        return (self.others[1] - self.others[0]) / 1e9

    def _cpu(self) -> int | None:
        return None if self.processes is None else process_cpu_ns(self.processes[1])

    def _others(self) -> None:
        if self.processes is not None and self.side != Side.REFERENCE:
            self.others.append(others_ns(*self.processes))

    def _serve(self) -> None:
        stream = _Reader(self._ours)
        try:
            while line := stream.line():
                self.received_bytes = stream.received
                self._handle(parse_message(line), stream)
            self.received_bytes = stream.received
        except Exception as error:
            # Any error is the worker's doing; answer it, or the worker waits until its limit.
            reason = first_line(error)
            self.problem = f"the worker's conversation broke the protocol: {reason}"
            try:
                self._send({"refused": reason})
                self._ours.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        finally:
            # Whatever happened, the other worker never waits for this one again.
            self.round.turns.gone(self.side)
            stream.close()

    def _send(self, message: dict[str, Any]) -> None:
        self._ours.sendall((json.dumps(message) + "\n").encode())

    def _settled(self, now: int) -> int:
        """The stamp of a ``next`` or ``begin`` the worker now waits on, taken once it is off
        its CPU (at most ``SETTLE_S`` after ``now``): read while it runs, its CPU clock lags a
        tick, and the rest would fall in the next span and void honest programs slow to block.
        Not ``end``: a late stamp would put the tail in the calls
        (``docs/measurements/kernelbench-notes.md``)."""
        if self.processes is None:
            return now
        worker, waited = self.processes[1], False
        deadline = now + int(SETTLE_S * 1e9)
        while running(worker) and time.perf_counter_ns() < deadline:
            waited = True
            time.sleep(_SETTLE_POLL_S)
        return time.perf_counter_ns() if waited else now

    def _handle(self, message: AnyMessage, stream: _Reader) -> None:
        now = time.perf_counter_ns()
        if isinstance(message, (Next, Marker)):
            now = self._settled(now)
        if isinstance(message, Loaded):
            self._loaded()
        elif isinstance(message, Ready):
            self._ready(message, now)
        elif self.ready_at is None:
            raise ValueError(f"{message.m!r} before ready")
        elif isinstance(message, Next):
            self._next(message, now)
        elif isinstance(message, Checked):
            if self._current is not None:
                raise ValueError("the checked tensors in the middle of a phase")
            self._checked(message, stream)
        else:
            self._in_chunk(message, now, stream)

    def _loaded(self) -> None:
        """Torch is loaded, nothing of the task yet: the worker is found, and moved to ``home``
        (it cannot move itself: the sandbox's init forbids it)."""
        if self._loaded_once or self.ready_at is not None:
            raise ValueError("'loaded' out of order")
        self._loaded_once = True
        if self._root is not None:
            self.processes = find_worker(self._root, self._forked)
        self._move_to(self.home)
        self._send({"placed": True})

    def _ready(self, message: Ready, now: int) -> None:
        """The worker's model is warmed up: the reference's sizes the plan, and the check seeds
        go (the candidate's once the plan is sized)."""
        if self.ready_at is not None or not self._loaded_once:
            raise ValueError("'ready' out of order")
        self.ready_at = now
        if self.processes is None and self._root is not None:
            self.processes = find_worker(self._root, self._forked)
        turns = self.round.turns
        if self.side == Side.REFERENCE:
            self.round.plan.decide(
                message.estimate_s,
                message.output_bytes,
                turns.stopping,
                input_bytes=message.input_bytes,
                inputs_s=message.inputs_s,
            )
            turns.sized()
        else:
            turns.wait_sized()
        self._send({"check": self.check_seeds})

    def _in_chunk(self, message: Marker | End | Outputs, now: int, stream: _Reader) -> None:
        """The chunk's ``begin``, ``end`` and ``outputs``, in that order."""
        if self._current is None or self._current[:2] != (message.phase, message.chunk):
            raise ValueError(f"{message.m!r} for a chunk that was not asked for")
        phase, number, expected = self._current
        chunk = self.chunks[(phase, number)]
        if message.m != expected:
            raise ValueError(f"{message.m!r} where {expected!r} was due")
        if isinstance(message, Marker):
            # The worker waits for the answer before its first call.
            chunk.host["begin"], chunk.cpu["begin"] = now, self._cpu()
            self._current = (phase, number, "end")
            self._send({"go": True})
        elif isinstance(message, End):
            chunk.host["end"], chunk.cpu["end"] = now, self._cpu()
            if self.cpu is not None and self.processes is not None:
                self.strayed += pinned(self.processes[1], self.cpu) is False
            if len(message.times) != chunk.calls:
                raise ValueError(f"{len(message.times)} times for {chunk.calls} calls")
            chunk.times = list(message.times)
            self._current = (phase, number, "outputs")
            self._send({"send": True})
        else:
            self._outputs(message, chunk, stream)
            self._current = (phase, number + 1, "next")
            self.round.turns.finish(self.side, phase, chunk.times)

    def _next(self, message: Next, asked: int) -> None:
        if self._current is None or self._current[2] != "next":
            if self._current is not None:
                raise ValueError("'next' out of order")
            if message.phase not in self.phases or message.phase in self._done:
                raise ValueError(f"phase {message.phase!r} is not due")
            if message.chunk != 0:
                raise ValueError("a phase starts at chunk 0")
        elif self._current[:2] != (message.phase, message.chunk):
            raise ValueError("'next' out of order")
        # The worker asks once it is done with the chunk before (it is blocked now).
        asked_cpu = self._cpu()
        if self._current is not None and self._current[2] == "next":
            before = self.chunks[(message.phase, message.chunk - 1)]
            before.host["done"], before.cpu["done"] = asked, asked_cpu
        pairs = message.phase == Phase.PAIRS
        if pairs and message.chunk == 0:
            self._others()
        calls = self.round.turns.grant(self.side, message.phase, message.chunk)
        if pairs and self.side == Side.REFERENCE:
            # Both workers wait now: the pair before is compared and its outputs let go.
            self.round.kept.settle()
        if calls and not self.chunks:
            # Its first timed chunk, the round holding the timing CPU's turn.
            self._move_to(self.cpu)
        self.waited_ns += time.perf_counter_ns() - asked
        self._waited_cpu(message.phase, asked_cpu)
        if not calls:
            self._phase_over(message.phase)
            return
        if pairs:
            first = self.round.plan.first(message.chunk)
        else:
            first = self.round.turns.baseline_first(message.phase, message.chunk)
        seeds = self.round.plan.seeds_for(first, calls)
        # Stamped before sending: a delay of this thread lengthens the span, never shortens it.
        cpu, sent = self._cpu(), time.perf_counter_ns()
        self._send({"seeds": seeds})
        chunk = Chunk(calls=calls, first=first, host={"sent": sent}, cpu={"sent": cpu})
        self.chunks[(message.phase, message.chunk)] = chunk
        self._current = (message.phase, message.chunk, "begin")

    def _move_to(self, cpu: int | None) -> None:
        """Every thread of the worker moved to ``cpu`` (None: left where it is); it cannot move
        itself, the sandbox's init forbids it."""
        if cpu is not None and self.processes is not None and not pin(self.processes[1], cpu):
            raise ValueError(f"the worker's threads could not all be moved to CPU {cpu}")

    def _phase_over(self, phase: Phase) -> None:
        if phase == Phase.PAIRS:
            self._others()
            if self.processes is not None:
                self.huge_pages = huge_pages(self.processes[1])
        self._done.append(phase)
        self._current = None
        # The candidate is let go once the reference's pairs and identity model are done;
        # torch.compile's baseline is informational and would eat the candidate's limit.
        if set(self.phases[:2]) <= set(self._done):
            self.round.turns.through(self.side)
        self._send({"seeds": []})

    def _waited_cpu(self, phase: Phase, asked: int | None) -> None:
        """Adds the worker's CPU time since it asked for its turn (``asked``) to its wait."""
        granted, total = self._cpu(), self._waiting_ns.get(phase, 0)
        if total is None or asked is None or granted is None:
            self._waiting_ns[phase] = None
        else:
            self._waiting_ns[phase] = total + granted - asked

    def _checked(self, message: Checked, stream: _Reader) -> None:
        """One check seed's tensors, each key once, in order, at most what two of the
        reference's calls' outputs and its inputs take."""
        reference, plan = self.side == Side.REFERENCE, self.round.plan
        files = SealedFiles(stream.take(message.files))
        try:
            if message.seed != self.round.checked.arrived(reference):
                raise ValueError("a check seed out of order")
            if sorted(item.key for item in message.items) != sorted(KEYS) or any(
                item.seed != message.seed for item in message.items
            ):
                raise ValueError("checked tensors that are not one of each key")
            total = sum(header.nbytes for item in message.items for header in item.tensors)
            bound = 2 * plan.output_bytes + plan.input_bytes + (1 << 20)
            if plan.output_bytes > 0 and total > bound:
                raise ValueError("more checked bytes than the reference's outputs take")
            values: dict[str, list[Any]] = {
                item.key: files.tensors(item.tensors) for item in message.items
            }
        except (ValueError, TypeError):
            files.close()
            raise
        self.round.checked.arrive(reference, message.seed, values, files)

    def _outputs(self, message: Outputs, chunk: Chunk, stream: _Reader) -> None:
        """Every timed call's outputs (none in the other phases): the kept ones held for their
        comparison, the others let go unread."""
        files, plan = SealedFiles(stream.take(message.files)), self.round.plan
        sent = list(range(chunk.calls)) if message.phase == Phase.PAIRS else []
        if [item.position for item in message.items] != sent:
            raise ValueError("outputs of other calls than the chunk's")
        total = sum(header.nbytes for item in message.items for header in item.tensors)
        if total > 2 * chunk.calls * plan.output_bytes + (1 << 20):
            raise ValueError("more output bytes than the reference's outputs take")
        kept = set(plan.keep_chunk(message.chunk)) if sent else set()
        for item in message.items:
            values = files.tensors(item.tensors)
            if chunk.first + item.position in kept:
                reference = self.side == Side.REFERENCE
                self.round.kept.hold(reference, chunk.first + item.position, values, item.reused)


_MOST_WAITING = 2 * MOST_FILES + 16
"""Descriptors a worker may have sent ahead of the messages that name them."""


class _Reader:
    """Lines from descriptor 3, with the descriptors sent beside them (``SCM_RIGHTS``): a message
    that names ``files`` takes that many from the front."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.pending = bytearray()
        self.fds: deque[int] = deque()
        self.received = 0

    def line(self) -> bytes:
        """The next line (b"" once the worker's end is closed)."""
        while True:
            end = self.pending.find(b"\n")
            if end >= 0:
                line = bytes(self.pending[: end + 1])
                del self.pending[: end + 1]
                return line
            if len(self.pending) > _LINE_BYTES:
                raise ValueError("a message longer than any the harness sends")
            data, fds, flags, _ = socket.recv_fds(self.channel, 1 << 16, MOST_FILES)
            self.fds.extend(fds)
            if flags & socket.MSG_CTRUNC or len(self.fds) > _MOST_WAITING:
                raise ValueError("more memory files than the harness takes at once")
            if not data:
                return b""
            self.received += len(data)
            self.pending += data

    def take(self, count: int) -> list[int]:
        if count > len(self.fds):
            raise ValueError("fewer memory files than the message names")
        return [self.fds.popleft() for _ in range(count)]

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.popleft())
