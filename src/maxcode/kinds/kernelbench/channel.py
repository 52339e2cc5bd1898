"""The parent's end of descriptor 3: seeds sent just in time, host time stamps, timed outputs.

Each worker run gets a socket as its descriptor 3 and a ``Conversation`` serving the other end
in a thread of the parent. It holds what the worker must not learn ahead (the check seeds until
the model is warmed up, each chunk's seeds until the worker's turn, which timed outputs are
checked, ever) and stamps every message with the parent's clock. The order is fixed
(``ready``, ``checked`` per check seed, then per chunk ``next``, ``begin``, ``end``,
``outputs``); tensors come as sealed memory files (``shared``). A message out of order,
malformed or too long ends it, kept as ``problem``. Turns are the ``Schedule``'s.
"""

from __future__ import annotations

import array
import json
import math
import os
import socket
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from maxcode.kinds.kernelbench.cpuclock import (
    HugePages,
    find_worker,
    huge_pages,
    others_ns,
    process_cpu_ns,
    running,
)
from maxcode.kinds.kernelbench.evidence import (
    AnyMessage,
    Checked,
    End,
    Marker,
    Next,
    Outputs,
    Ready,
    TensorHeader,
    first_line,
    parse_message,
)
from maxcode.kinds.kernelbench.outputs import KEYS
from maxcode.kinds.kernelbench.schedule import Schedule, TimedPlan
from maxcode.kinds.kernelbench.settings import CHECK_SEEDS
from maxcode.kinds.kernelbench.shared import Pack, SharedTensor, TensorPlace
from maxcode.kinds.kernelbench.worker.protocol import MOST_FILES, Part, Phase, Side

_LINE_BYTES = 1 << 20
_JOIN_S = 10.0
SETTLE_S = 0.02
"""How long the parent waits, at most, for a worker that sent ``next`` or ``begin`` to block,
before it stamps the message (``_settled``)."""
_SETTLE_POLL_S = 20e-6


@dataclass
class Chunk:
    """Host time stamps (ns, the parent's clock) of one chunk of timed calls."""

    calls: int
    first: int
    """Position of the chunk's first call (its seeds are the plan's from there)."""
    asked: int
    """The worker asked for the chunk (it waited from there for its turn)."""
    sent: int
    """The chunk's seeds were sent (its inputs cannot exist before)."""
    begin: int | None = None
    end: int | None = None
    done: int | None = None
    """The worker asked for its next chunk, having sent the kept outputs and freed the
    chunk's memory."""
    times: list[float] = field(default_factory=list)
    """In-process seconds of each call, as the worker reported them."""
    cpu: dict[str, int | None] = field(default_factory=dict)
    """The worker's CPU clock (ns, ``cpuclock``) at ``sent``, ``begin``, ``end`` and ``done``,
    each read while the worker waits for the parent (read while it runs, the clock lags up to
    a scheduler tick)."""


class Conversation:
    """The parent's end of one worker run's descriptor 3 (see the module's docstring)."""

    def __init__(
        self, schedule: Schedule, side: Side, check_seeds: list[int], phases: tuple[Phase, ...]
    ) -> None:
        self.schedule, self.side, self.check_seeds, self.phases = (
            schedule,
            side,
            check_seeds,
            phases,
        )
        self.plan: TimedPlan = schedule.plan
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ready_at: int | None = None
        self.chunks: dict[tuple[Phase, int], Chunk] = {}
        self.problem: str | None = None
        """Why the conversation was ended (None: it followed the protocol)."""
        self.ended_at: int | None = None
        """When the conversation ended (the worker's run was over)."""
        self.waited_ns = 0
        """Time the worker waited for its turns (blocked on its descriptor 3)."""
        self.received_bytes = 0
        """Bytes the worker sent on its descriptor 3 (its messages: tensors go as files)."""
        self._root: int | None = None
        self._forked = False
        self.processes: tuple[int, int] | None = None
        """The run's init and worker (host pids), found when the worker is ready."""
        self.others: list[int] = []
        """CPU ns of the run's other processes when the timed calls (phase K) began and
        ended (``cpuclock.others_ns``; the candidate's run only)."""
        self.huge_pages: HugePages | None = None
        """The worker's huge pages when its timed calls (phase K) ended."""
        self._done: list[Phase] = []
        self._current: tuple[Phase, int, str] | None = None
        self._waiting_ns: dict[Phase, int | None] = {}
        """The worker's CPU time while it waited for its turns, per phase (``waiting_cpu``)."""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def started(self, pid: int, forked: bool = False) -> None:
        """The sandbox started the worker's run as ``pid`` (its processes are below it);
        ``forked``: the run's program is a zygote that forks the worker
        (``cpuclock.find_worker``)."""
        self._root = pid
        self._forked = forked

    def _cpu(self) -> int | None:
        return None if self.processes is None else process_cpu_ns(self.processes[1])

    def _others(self) -> None:
        # Only the candidate's are judged.
        if self.processes is not None and self.side != Side.REFERENCE:
            self.others.append(others_ns(*self.processes))

    @property
    def worker_fd(self) -> int:
        """The descriptor to hand the worker as its descriptor 3."""
        return self._theirs.fileno()

    def close(self) -> None:
        """After the run: drop the worker's end, wait for the conversation to end."""
        self.schedule.gone(self.side)
        self._theirs.close()
        self._thread.join(timeout=_JOIN_S)
        if self._thread.is_alive():
            self.problem = self.problem or "the conversation did not end with the run"
            self._ours.shutdown(socket.SHUT_RDWR)
            self._thread.join(timeout=_JOIN_S)
        self._ours.close()

    def release(self) -> None:
        """After the judgement: the outputs still held go (nothing may read them after)."""
        self.schedule.checked.close()
        self.schedule.kept.close()

    @property
    def checked(self) -> bool:
        """Every check seed's tensors came."""
        return self.schedule.checked.arrived(self.side == Side.REFERENCE) == CHECK_SEEDS

    def complete(self, phase: Phase) -> bool:
        """``phase`` ran to its end and every chunk was stamped from seeds to outputs."""
        return phase in self._done and all(
            chunk.begin is not None and chunk.end is not None and chunk.done is not None
            for (name, _), chunk in self.chunks.items()
            if name == phase
        )

    def _phase(self, phase: Phase) -> list[Chunk]:
        """The chunks of ``phase``, in order."""
        return [chunk for (name, _), chunk in sorted(self.chunks.items()) if name == phase]

    def chunk_times(self, phase: Phase) -> list[list[float]]:
        """Per-call seconds of each chunk of ``phase``, in order."""
        return [chunk.times for chunk in self._phase(phase)]

    def outside(self, phase: Phase, clock: str = "host") -> dict[Part, list[float]] | None:
        """Seconds per call of each chunk of ``phase`` that its in-process times do not
        account for, in the three ``Part``s split at its markers: making the inputs
        (seeds sent to ``begin``), between the calls (``begin`` to ``end`` less the claimed
        seconds) and sending the outputs (``end`` to the next request), with any work a
        candidate moved there. Kept apart so the quiet parts are not drowned in the noisy one.
        ``clock``: "host" or "cpu" (the worker's CPU clock). None when the phase did not
        complete or a clock could not be read."""
        split = self._split(phase, clock)
        if split is None:
            return None
        return {
            part: [seconds[part] / max(chunk.calls, 1) for chunk, seconds in split] for part in Part
        }

    def spent(self, phase: Phase) -> dict[str, float] | None:
        """Seconds of ``phase``'s chunks by part, summed over them: ``calls`` (the calls'
        claimed seconds) and each ``Part`` by host time; None as for ``outside``."""
        split = self._split(phase, "host")
        if split is None:
            return None
        spent = {"calls": sum(sum(chunk.times) for chunk, _ in split)}
        for part in Part:
            spent[part] = sum(seconds[part] for _, seconds in split)
        return spent

    def _split(self, phase: Phase, clock: str) -> list[tuple[Chunk, dict[Part, float]]] | None:
        """Each chunk of ``phase`` with its seconds outside its calls by part (``outside``
        says which), by ``clock``; None when the phase did not complete or a stamp is
        missing."""
        if not self.complete(phase):
            return None
        split = []
        for chunk in self._phase(phase):
            stamps: list[int | None] = (
                [chunk.sent, chunk.begin, chunk.end, chunk.done]
                if clock == "host"
                else [chunk.cpu.get(name) for name in ("sent", "begin", "end", "done")]
            )
            if None in stamps:
                return None
            sent, begin, end, done = (int(stamp or 0) for stamp in stamps)
            seconds = {
                Part.MAKING: (begin - sent) / 1e9,
                Part.BETWEEN: (end - begin) / 1e9 - sum(chunk.times),
                Part.SENDING: (done - end) / 1e9,
            }
            split.append((chunk, seconds))
        return split

    def span_cpu(self, phase: Phase) -> tuple[float, float] | None:
        """(CPU seconds, host seconds) of the worker from each chunk's seeds to its end,
        summed over the chunks of ``phase``; None when the phase did not complete or a clock
        was not read. The CPU readings fall inside the host stamps, so a process on one CPU
        cannot show more CPU time than host time."""
        if not self.complete(phase):
            return None
        cpu = host = 0
        for chunk in self._phase(phase):
            sent, done = chunk.cpu.get("sent"), chunk.cpu.get("done")
            if sent is None or done is None:
                return None
            cpu, host = cpu + done - sent, host + (chunk.done or 0) - chunk.sent
        return cpu / 1e9, host / 1e9

    def waiting_cpu(self, phase: Phase) -> float | None:
        """CPU seconds of the worker while it waited for its turns in ``phase`` (each request
        for a chunk to its answer), when an honest worker is blocked. None when the phase did
        not complete or a clock was not read."""
        waited = self._waiting_ns.get(phase)
        if not self.complete(phase) or waited is None:
            return None
        return waited / 1e9

    def others_s(self) -> float | None:
        """CPU seconds the run's other processes spent while the calls were timed."""
        if len(self.others) != 2:
            return None
        return (self.others[1] - self.others[0]) / 1e9

    def times(self, phase: Phase) -> list[float]:
        """Per-call seconds of every call of ``phase``, in order."""
        return [value for times in self.chunk_times(phase) for value in times]

    def per_call(self, phase: Phase) -> float | None:
        """Host seconds per call of ``phase``: the median over its chunks of the time between
        the markers (a cheat shows in every chunk; one chunk the scheduler held up does not
        decide it). None when the phase did not complete."""
        rates = self.host_rates(phase)
        return statistics.median(rates) if rates else None

    def least_per_call(self, phase: Phase) -> float | None:
        """The least host seconds per call over the chunks of ``phase`` (the identity model's:
        the harness's own cost), since the parent's delays in stamping are not that cost."""
        rates = self.host_rates(phase)
        return min(rates) if rates else None

    def cpu_rates(self, phase: Phase) -> list[float] | None:
        """The worker's CPU seconds per call between the markers of each chunk of ``phase``,
        read while the worker is blocked (late stamps change nothing). None when the phase did
        not complete or the clock could not be read."""
        if not self.complete(phase):
            return None
        rates = []
        for chunk in self._phase(phase):
            begin, end = chunk.cpu.get("begin"), chunk.cpu.get("end")
            if begin is None or end is None:
                return None
            rates.append(max(end - begin, 0) / 1e9 / max(chunk.calls, 1))
        return rates

    def host_rates(self, phase: Phase) -> list[float]:
        """Host seconds per call between each chunk's markers ([] when ``phase`` did not
        complete): on a GPU, the device's time for the chunk (the worker waits for the whole
        device before its end marker)."""
        if not self.complete(phase):
            return []
        return [
            max((chunk.end or 0) - (chunk.begin or 0), 0) / 1e9 / chunk.calls
            for chunk in self._phase(phase)
        ]

    def _serve(self) -> None:
        stream = _Reader(self._ours)
        try:
            while True:
                line = stream.line()
                self.received_bytes = stream.received
                if not line:
                    return
                self._handle(parse_message(line), stream)
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
            self.ended_at = time.perf_counter_ns()
            # Whatever happened, the other worker never waits for this one again.
            self.schedule.gone(self.side)
            stream.close()

    def _send(self, message: dict[str, Any]) -> None:
        self._ours.sendall((json.dumps(message) + "\n").encode())

    def _settled(self, now: int) -> int:
        """The stamp of a ``next`` or ``begin`` the worker now waits on, taken once the worker
        is off its CPU (at most ``SETTLE_S`` after ``now``, its arrival).

        A CPU clock read from outside lags up to a scheduler tick while the process runs: a
        worker still on its CPU after writing its message reads low, and the rest would fall in
        the next span (its wait for a turn, judged by ``parallel``, or its calls, judged by
        ``timing``), which would void honest programs slow to block. Not ``end``: there a lagging
        reading only shrinks what ``timing`` sees, and a late stamp would put the tail in the
        calls (``docs/measurements/kernelbench-notes.md``)."""
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
        if isinstance(message, Ready):
            if self.ready_at is not None:
                raise ValueError("ready twice")
            self.ready_at = now
            if self._root is not None:
                self.processes = find_worker(self._root, self._forked)
            if self.side == Side.REFERENCE:
                self.plan.decide(
                    message.estimate_s,
                    message.output_bytes,
                    self.schedule.stopping,
                    input_bytes=message.input_bytes,
                    inputs_s=message.inputs_s,
                )
                self.schedule.sized()
            else:
                self.schedule.wait_sized()
            self._send({"check": self.check_seeds})
            return
        if self.ready_at is None:
            raise ValueError(f"{message.m!r} before ready")
        if isinstance(message, Next):
            self._next(message, now)
            return
        if isinstance(message, Checked):
            if self._current is not None:
                raise ValueError("the checked tensors in the middle of a phase")
            self._checked(message, stream)
            return
        if self._current is None or self._current[:2] != (message.phase, message.chunk):
            raise ValueError(f"{message.m!r} for a chunk that was not asked for")
        phase, number, expected = self._current
        chunk = self.chunks[(phase, number)]
        if message.m != expected:
            raise ValueError(f"{message.m!r} where {expected!r} was due")
        if isinstance(message, Marker):
            # The worker waits for the answer before its first call.
            chunk.begin, chunk.cpu["begin"] = now, self._cpu()
            self._current = (phase, number, "end")
            self._send({"go": True})
        elif isinstance(message, End):
            chunk.end, chunk.cpu["end"] = now, self._cpu()
            if len(message.times) != chunk.calls:
                raise ValueError(f"{len(message.times)} times for {chunk.calls} calls")
            chunk.times = list(message.times)
            self._current = (phase, number, "outputs")
            self._send({"send": True})
        else:
            assert isinstance(message, Outputs)
            self._outputs(message, chunk, stream)
            self._current = (phase, number + 1, "next")
            self.schedule.finish(self.side, phase, chunk.times)

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
            before.done, before.cpu["done"] = asked, asked_cpu
        if message.phase == Phase.PAIRS and message.chunk == 0:
            self._others()
        calls = self.schedule.grant(self.side, message.phase, message.chunk)
        if message.phase == Phase.PAIRS and self.side == Side.REFERENCE:
            # Both workers wait now: the pair before is compared and its outputs let go.
            self.schedule.kept.settle()
        self.waited_ns += time.perf_counter_ns() - asked
        self._waited_cpu(message.phase, asked_cpu)
        if not calls:
            if message.phase == Phase.PAIRS:
                self._others()
                if self.processes is not None:
                    self.huge_pages = huge_pages(self.processes[1])
            self._done.append(message.phase)
            self._current = None
            # The candidate is let go once the reference's pairs and identity model are done;
            # torch.compile's baseline is informational and would eat the candidate's limit.
            if set(self.phases[:2]) <= set(self._done):
                self.schedule.through(self.side)
            self._send({"seeds": []})
            return
        if message.phase == Phase.PAIRS:
            first = self.plan.first(message.chunk)
        else:
            first = self.schedule.baseline_first(message.phase, message.chunk)
        seeds = self.plan.seeds_for(first, calls)
        # Stamped before sending: a delay of this thread lengthens the span, never shortens it.
        cpu, sent = self._cpu(), time.perf_counter_ns()
        self._send({"seeds": seeds})
        self.chunks[(message.phase, message.chunk)] = Chunk(
            calls=calls, first=first, asked=asked, sent=sent, cpu={"sent": cpu}
        )
        self._current = (message.phase, message.chunk, "begin")

    def _waited_cpu(self, phase: Phase, asked: int | None) -> None:
        """Adds the worker's CPU time since ``asked`` (its clock when it asked for its turn) to
        what it spent waiting in ``phase`` (``waiting_cpu``)."""
        granted, total = self._cpu(), self._waiting_ns.get(phase, 0)
        if total is None or asked is None or granted is None:
            self._waiting_ns[phase] = None
        else:
            self._waiting_ns[phase] = total + granted - asked

    def _checked(self, message: Checked, stream: _Reader) -> None:
        """One check seed's tensors, each key once, the seeds in order; once the reference
        told its sizes (the candidate's check seeds wait for them), at most what two of its
        calls' outputs and its inputs take."""
        reference = self.side == Side.REFERENCE
        pack = Pack(stream.take(message.files))
        try:
            if message.seed != self.schedule.checked.arrived(reference):
                raise ValueError("a check seed out of order")
            if sorted(item.key for item in message.items) != sorted(KEYS) or any(
                item.seed != message.seed for item in message.items
            ):
                raise ValueError("checked tensors that are not one of each key")
            total = sum(header.nbytes for item in message.items for header in item.tensors)
            if self.plan.output_bytes > 0 and total > (
                2 * self.plan.output_bytes + self.plan.input_bytes + (1 << 20)
            ):
                raise ValueError("more checked bytes than the reference's outputs take")
            values: dict[str, list[Any]] = {
                item.key: _tensors(pack, item.tensors) for item in message.items
            }
        except (ValueError, TypeError):
            pack.close()
            raise
        self.schedule.checked.arrive(reference, message.seed, values, pack)

    def _outputs(self, message: Outputs, chunk: Chunk, stream: _Reader) -> None:
        """Every timed call's outputs, in order (none in the other phases): the kept ones
        are held for their comparison, the others let go unread. The worker does not know
        which."""
        pack = Pack(stream.take(message.files))
        first = chunk.first
        sent = list(range(chunk.calls)) if message.phase == Phase.PAIRS else []
        if [item.position for item in message.items] != sent:
            raise ValueError("outputs of other calls than the chunk's")
        total = sum(header.nbytes for item in message.items for header in item.tensors)
        if total > 2 * chunk.calls * self.plan.output_bytes + (1 << 20):
            raise ValueError("more output bytes than the reference's outputs take")
        kept = set(self.plan.keep_chunk(message.chunk)) if sent else set()
        for item in message.items:
            values = _tensors(pack, item.tensors)
            if first + item.position in kept:
                self.schedule.kept.hold(
                    self.side == Side.REFERENCE, first + item.position, values, item.reused
                )


def _tensors(pack: Pack, headers: list[TensorHeader]) -> list[SharedTensor]:
    """The tensors ``headers`` place in ``pack`` (ValueError: the worker broke the
    protocol)."""
    import torch

    found = []
    for header in headers:
        dtype = getattr(torch, header.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"a tensor of unknown dtype {header.dtype!r}")
        if math.prod(header.shape) * dtype.itemsize != header.nbytes:
            raise ValueError("a tensor whose byte count does not match its shape")
        place = TensorPlace(dtype, tuple(header.shape), header.nbytes, header.at)
        found.append(pack.tensor(place))
    return found


_MOST_WAITING = 2 * MOST_FILES + 16
"""Descriptors a worker may have sent ahead of the messages that name them."""


class _Reader:
    """Lines from the worker's end of descriptor 3, with the descriptors sent beside them
    (``SCM_RIGHTS``), in the order they came: a message that names ``files`` takes that many
    from the front."""

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
            data, ancillary, flags, _ = self.channel.recvmsg(1 << 16, _ANCILLARY)
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    self.fds.extend(array.array("i", raw[: len(raw) - len(raw) % 4]))
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


_ANCILLARY = socket.CMSG_SPACE(MOST_FILES * array.array("i").itemsize)
