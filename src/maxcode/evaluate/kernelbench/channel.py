"""The parent's end of descriptor 3: seeds sent just in time, host time stamps, timed outputs.

Each worker run gets a socket as its descriptor 3 and a ``Conversation`` serving the other end
in a thread of the parent. The conversation holds the secrets the worker must not learn ahead
(the check seeds until the model is built and warmed up, each chunk's seeds until the worker
asks for that chunk, which calls' outputs are checked until the calls ran) and stamps every
message with the parent's clock. It follows a fixed order (``ready``, then per chunk ``next``,
``begin``, ``end``, ``outputs``); a message out of that order, a malformed one or more bytes
than asked for ends it, and what went wrong is kept as ``problem`` (an ``evidence`` finding).
"""

from __future__ import annotations

import json
import math
import secrets
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from maxcode.evaluate.kernelbench.evidence import (
    Marker,
    Next,
    Outputs,
    Ready,
    parse_message,
)
from maxcode.evaluate.kernelbench.settings import CHUNK, KEEP_BYTES, SAMPLED_OUTPUTS

_LINE_BYTES = 1 << 20
_JOIN_S = 10.0


@dataclass
class TimedPlan:
    """The timed calls of one evaluation, shared by the reference's run and the candidate's:
    how many, the seed of each (drawn when first asked for), the calls whose outputs are kept.
    The reference's plan decides; the candidate makes exactly those calls."""

    trials: int | None = None
    keep: frozenset[int] | None = None
    """Positions whose outputs are kept (None: all)."""
    output_bytes: int = 0
    """Bytes of one call's outputs, as the reference reported them."""
    seeds: list[int] = field(default_factory=list)
    _draw: secrets.SystemRandom = field(default_factory=secrets.SystemRandom)

    def decide(self, trials: int, output_bytes: int) -> None:
        self.trials, self.output_bytes = trials, output_bytes
        if output_bytes * trials <= KEEP_BYTES:
            self.keep = None
        else:
            self.keep = frozenset(self._draw.sample(range(trials), min(trials, SAMPLED_OUTPUTS)))

    def seeds_for(self, first: int, calls: int) -> list[int]:
        while len(self.seeds) < first + calls:
            self.seeds.append(self._draw.randrange(2**63))
        return self.seeds[first : first + calls]

    def kept(self, position: int) -> bool:
        return self.keep is None or position in self.keep

    def positions(self) -> list[int]:
        """Every kept position, in order."""
        assert self.trials is not None
        return [position for position in range(self.trials) if self.kept(position)]

    def byte_budget(self) -> int:
        """The most output bytes a run may send (twice what the reference's outputs take)."""
        return 2 * max(KEEP_BYTES, SAMPLED_OUTPUTS * self.output_bytes) + (1 << 20)


@dataclass
class Chunk:
    """Host time stamps (ns, the parent's clock) of one chunk of timed calls."""

    calls: int
    sent: int
    """The chunk's seeds were sent (its inputs cannot exist before)."""
    begin: int | None = None
    end: int | None = None
    received: int | None = None
    """The chunk's kept outputs arrived."""


class Conversation:
    """The parent's end of one worker run's descriptor 3 (see the module's docstring)."""

    def __init__(
        self, plan: TimedPlan, check_seeds: list[int], phases: tuple[str, ...], decides: bool
    ) -> None:
        self.plan, self.check_seeds, self.phases, self.decides = plan, check_seeds, phases, decides
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ready_at: int | None = None
        self.chunks: dict[tuple[str, int], Chunk] = {}
        self.outputs: dict[int, list[Any]] = {}
        """Kept outputs of the timed calls (phase K), by position."""
        self.problem: str | None = None
        """Why the conversation was ended (None: it followed the protocol)."""
        self._done: list[str] = []
        self._current: tuple[str, int, str] | None = None
        self._received_bytes = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def worker_fd(self) -> int:
        """The descriptor to hand the worker as its descriptor 3."""
        return self._theirs.fileno()

    def close(self) -> None:
        """After the run: drop the worker's end, wait for the conversation to end."""
        self._theirs.close()
        self._thread.join(timeout=_JOIN_S)
        if self._thread.is_alive():
            self.problem = self.problem or "the conversation did not end with the run"
            self._ours.shutdown(socket.SHUT_RDWR)
            self._thread.join(timeout=_JOIN_S)
        self._ours.close()

    def complete(self, phase: str) -> bool:
        """Every chunk of ``phase`` ran and was stamped from seeds to outputs."""
        return phase in self._done and all(
            chunk.begin is not None and chunk.end is not None and chunk.received is not None
            for (name, _), chunk in self.chunks.items()
            if name == phase
        )

    def per_call(self, phase: str, span: bool = False) -> float | None:
        """Host seconds per call of ``phase``: the median over its chunks of the time between
        the begin and end markers; ``span``: the least over its chunks of the time from the
        seeds sent to the outputs received. None when the phase did not complete. A
        time-keeping cheat shows in every chunk; the median (the least, for spans, which hold
        two round trips through this thread and so every delay of its scheduling) keeps a
        chunk that the scheduler held up from looking like one."""
        if not self.complete(phase):
            return None
        rates = []
        for (name, _), chunk in sorted(self.chunks.items()):
            if name != phase:
                continue
            start, stop = (chunk.sent, chunk.received) if span else (chunk.begin, chunk.end)
            assert start is not None and stop is not None
            rates.append(max(stop - start, 0) / 1e9 / chunk.calls)
        if not rates:
            return None
        return min(rates) if span else statistics.median(rates)

    def _serve(self) -> None:
        stream = self._ours.makefile("rb")
        try:
            while True:
                line = stream.readline(_LINE_BYTES)
                if not line:
                    return
                if not line.endswith(b"\n"):
                    raise ValueError("a message longer than any the harness sends")
                self._handle(parse_message(line), stream)
        except (ValueError, OSError) as error:
            self.problem = f"the worker's conversation broke the protocol: {error}"
            try:
                self._send({"refused": str(error)[:200]})
                self._ours.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        finally:
            stream.close()

    def _send(self, message: dict[str, Any]) -> None:
        self._ours.sendall((json.dumps(message) + "\n").encode())

    def _handle(self, message: Ready | Next | Marker | Outputs, stream: Any) -> None:
        now = time.perf_counter_ns()
        if isinstance(message, Ready):
            if self.ready_at is not None:
                raise ValueError("ready twice")
            self.ready_at = now
            if self.decides:
                self.plan.decide(message.trials, message.output_bytes)
            if self.plan.trials is None:
                raise ValueError("no timed plan (the reference's run did not decide one)")
            self._send({"check": self.check_seeds, "trials": self.plan.trials})
            return
        if self.ready_at is None:
            raise ValueError(f"{message.m!r} before ready")
        if isinstance(message, Next):
            self._next(message)
            return
        if self._current is None or self._current[:2] != (message.phase, message.chunk):
            raise ValueError(f"{message.m!r} for a chunk that was not asked for")
        phase, number, expected = self._current
        chunk = self.chunks[(phase, number)]
        if message.m != expected:
            raise ValueError(f"{message.m!r} where {expected!r} was due")
        if isinstance(message, Marker) and message.m == "begin":
            chunk.begin = now
            self._current = (phase, number, "end")
        elif isinstance(message, Marker):
            chunk.end = now
            self._current = (phase, number, "outputs")
            first = number * CHUNK
            keep = [
                position - first
                for position in range(first, first + chunk.calls)
                if phase == "K" and self.plan.kept(position)
            ]
            self._send({"keep": keep})
        else:
            assert isinstance(message, Outputs)
            self._outputs(message, chunk, number * CHUNK, stream)
            chunk.received = time.perf_counter_ns()
            assert self.plan.trials is not None
            last = (number + 1) * CHUNK >= self.plan.trials
            self._current = None if last else (phase, number + 1, "next")
            if last:
                self._done.append(phase)

    def _next(self, message: Next) -> None:
        trials = self.plan.trials
        assert trials is not None
        if self._current is None:
            if message.phase not in self.phases or message.phase in self._done:
                raise ValueError(f"phase {message.phase!r} is not due")
            if message.chunk != 0:
                raise ValueError("a phase starts at chunk 0")
        elif self._current != (message.phase, message.chunk, "next"):
            raise ValueError("'next' out of order")
        first = message.chunk * CHUNK
        if message.calls != min(CHUNK, trials - first):
            raise ValueError(f"{message.calls} calls asked for chunk {message.chunk}")
        seeds = self.plan.seeds_for(first, message.calls)
        self._send({"seeds": seeds})
        self.chunks[(message.phase, message.chunk)] = Chunk(
            calls=message.calls, sent=time.perf_counter_ns()
        )
        self._current = (message.phase, message.chunk, "begin")

    def _outputs(self, message: Outputs, chunk: Chunk, first: int, stream: Any) -> None:
        import torch

        wanted = [
            position
            for position in range(first, first + chunk.calls)
            if message.phase == "K" and self.plan.kept(position)
        ]
        if [item.position for item in message.items] != wanted:
            raise ValueError("outputs of other calls than the ones asked for")
        for item in message.items:
            values = []
            for header in item.tensors:
                dtype = getattr(torch, header.dtype, None)
                if not isinstance(dtype, torch.dtype):
                    raise ValueError(f"an output of unknown dtype {header.dtype!r}")
                size = math.prod(header.shape) * dtype.itemsize
                if size != header.nbytes:
                    raise ValueError("an output whose byte count does not match its shape")
                self._received_bytes += size
                if self._received_bytes > self.plan.byte_budget():
                    raise ValueError("more output bytes than the reference's outputs take")
                raw = stream.read(size) if size else b""
                if len(raw) != size:
                    raise ValueError("an output cut short")
                if size:
                    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                    values.append(flat.view(dtype).reshape(header.shape))
                else:
                    values.append(torch.empty(header.shape, dtype=dtype))
            self.outputs[item.position] = values
