"""The timed calls of one callable, chunk by chunk as the parent grants them, and what keeps
the two sides' memory alike: the heap reserved before the calls, inputs placed and chunks
padded by draws from the parent's seeds."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .conversation import Channel, TensorParcel, perf_counter
from .protocol import WorkerSpec

_ALIGNMENT_SLACK = 16 << 20
"""Bytes the reserve holds beyond its chunks and calls, for their tensors' 2 MiB alignment."""
_TRIM_BYTES = int(os.environ.get("MALLOC_TRIM_THRESHOLD_", 1 << 30))
"""Free memory at the top of the heap beyond which the allocator hands it back."""


def reserve(torch: Any, spec: WorkerSpec, call_bytes: int) -> None:
    """Faults in, before the timed calls, the heap the chunks will need and hands it back to
    the allocator, which keeps it up to its trim threshold: otherwise a growing heap's page
    faults fall inside one side's calls. One block, after small blocks are freed, so that 2
    MiB-aligned tensors find room in one piece."""
    if call_bytes <= 0:
        return
    chunk = min(int(spec.chunk_bytes), int(spec.chunk_calls) * call_bytes)
    pool = [torch.empty(number % 4096 + 1) for number in range(4096)]
    pool += [bytes(512 + 61 * number) for number in range(2048)]
    del pool
    # One call at least, its tensors' alignment, and the largest chunk pad.
    room = 2 * max(chunk, call_bytes) + 2 * call_bytes + _ALIGNMENT_SLACK + CHUNK_PAD_BYTES
    # No more than the allocator keeps: more only raises the peak memory.
    room = min(room, _TRIM_BYTES - _ALIGNMENT_SLACK)
    reserve = torch.ones(room, dtype=torch.uint8)
    del reserve


PLACEMENT_BYTES = 2 << 20
"""The span over which a timed input's place is drawn (``Timing._placed``)."""
PAGE = 4096
CHUNK_PAD_BYTES = 8 << 20
"""The most a chunk's buffers are shifted by on a CPU (``chunk_pad_bytes``)."""


def _mixed(value: int) -> int:
    """A multiplicative hash to 64 bits: places and pads drawn from the parent's seeds."""
    return (value * 0xBF58476D1CE4E5B9) % (1 << 64)


def chunk_pad_bytes(seed: int) -> int:
    """Bytes of the pad a CPU chunk allocates before its inputs and frees with its outputs:
    whole pages drawn from its first ``seed``, the same on both sides, so a forward's
    temporaries do not land on the same pages for a whole worker."""
    return PAGE * ((_mixed(seed) >> 20) % (CHUNK_PAD_BYTES // PAGE))


class Timing:
    """Timed calls of one callable, each on inputs of its own from a seed sent just before its
    chunk (no cache of earlier answers can serve it), every call's outputs sent after the chunk
    (the parent checks those it drew without naming them)."""

    def __init__(
        self,
        torch: Any,
        spec: WorkerSpec,
        device: Any,
        make_inputs: Callable[[int], list[Any]],
        sync: Callable[[], None],
        flat: Callable[[Any], list[Any]],
        channel: Channel,
        staging: Any,
    ) -> None:
        self.torch, self.spec, self.device = torch, spec, device
        self.make_inputs, self.sync, self.flat = make_inputs, sync, flat
        self.channel, self.staging = channel, staging
        self.cuda = device.type == "cuda"
        self.last: Any = None

    def warm_up(
        self, model: Callable[..., Any], inputs: list[Any] | None = None
    ) -> tuple[float, int, int, float]:
        """Warm-up calls (at least two, until ``warmup_s``); returns the fastest call's seconds,
        one call's output and input bytes, the fastest making of one call's inputs. With
        ``inputs`` (a model that reads none), every call gets those."""
        spec = self.spec
        estimate, output_bytes, input_bytes, spent = float("inf"), 0, 0, 0.0
        making = float("inf")
        seeds = spec.warmup_seeds
        for number in range(spec.warmup):
            seed = seeds[number % len(seeds)]
            start = perf_counter()
            given = inputs if inputs is not None else self._placed(self.make_inputs(seed), seed)
            self.sync()
            made = perf_counter() - start
            making = 0.0 if inputs is not None else min(making, made)
            start = perf_counter()
            output = model(*given)
            self.sync()
            seconds = perf_counter() - start
            estimate, spent = min(estimate, seconds), spent + made + seconds
            values = output if isinstance(output, (tuple, list)) else [output]
            output_bytes, input_bytes = self._bytes(values), self._bytes(given)
            # Let go before the next inputs are made (gigabytes at full size).
            del given, output, values
            if number >= 1 and spent >= spec.warmup_s:
                break
        if estimate == float("inf"):
            return 0.0, output_bytes, input_bytes, 0.0
        return estimate, output_bytes, input_bytes, making

    def _placed(self, inputs: list[Any], seed: int) -> list[Any]:
        """On a CPU, each contiguous input tensor copied to whole pages within
        ``PLACEMENT_BYTES`` past the start of a buffer of its own, drawn from the call's seed:
        where an output lands relative to its input changes a call's speed; drawn per call, it
        is noise the pairs average, not a bias a round repeats."""
        if self.cuda:
            return inputs
        torch = self.torch
        placed = []
        for number, value in enumerate(inputs):
            if not (isinstance(value, torch.Tensor) and value.is_contiguous() and value.numel()):
                placed.append(value)
                continue
            size = value.numel() * value.element_size()
            span = min(PLACEMENT_BYTES, 1 << (size - 1).bit_length())
            if span <= PAGE:  # nothing to draw within a page
                placed.append(value)
                continue
            # The parent's seed mixed with the input's number.
            mixed = _mixed(seed ^ (number * 0x9E3779B97F4A7C15))
            offset = PAGE * ((mixed >> 24) % (span // PAGE))
            room = torch.empty(size + span, dtype=torch.uint8)
            moved = room[offset : offset + size].view(value.dtype).view(value.shape)
            moved.copy_(value)
            placed.append(moved)
        return placed

    def _bytes(self, values: Any) -> int:
        return sum(
            value.numel() * value.element_size()
            for value in values
            if isinstance(value, self.torch.Tensor)
        )

    def run(
        self, model: Callable[..., Any], phase: str, *, one_input_set: list[Any] | None = None
    ) -> list[float]:
        """Chunks of timed calls while the parent sends seeds (``one_input_set``: for all)."""
        torch = self.torch
        flush = torch.empty(64 << 20, dtype=torch.int32, device=self.device) if self.cuda else None
        samples: list[float] = []
        chunk = 0
        while True:
            where = {"phase": phase, "chunk": chunk}
            answer = self.channel.ask({"m": "next", **where})
            seeds = [int(seed) for seed in answer["seeds"]]
            if not seeds:
                return samples
            # Inputs made before the begin marker: the host time between the markers is the calls'.
            pad = None
            if not self.cuda:
                pad = torch.empty(chunk_pad_bytes(seeds[0]) + 1, dtype=torch.uint8)
            batch = []
            for seed in seeds:
                if one_input_set is None:
                    batch.append(self._placed(self.make_inputs(seed), seed))
                else:
                    batch.append(one_input_set)
            # On a GPU, wait for the kernels that make the inputs, or they fall in the calls'.
            self.sync()
            outputs: list[list[Any]] = []
            # The parent reads this process's CPU clock before it answers.
            self.channel.ask({"m": "begin", **where})
            marks = []
            for given in batch:
                marks.append(self._call(model, given, flush))
                # Every call's outputs made plain tensors: which are kept is drawn after the chunk.
                outputs.append(self.flat(self.last))
                self.last = None
            times = self._claims(marks)
            # Blocked for the answer at once, while the parent reads this process's CPU clock.
            self.channel.send({"m": "end", **where, "times": times})
            self.channel.receive()
            samples += times
            del batch, given
            self._send_outputs(outputs if phase == "K" else [], where)
            # Freed before the next chunk is asked for, so the freeing counts in this chunk.
            del outputs, pad
            chunk += 1

    def _send_outputs(self, outputs: list[list[Any]], where: dict[str, Any]) -> None:
        """Sends every call's outputs of the chunk, each marked ``reused`` when a later call
        returned its buffer again (found after the calls, not between them)."""
        owners: dict[int, int] = {}
        reused: set[int] = set()
        for position, values in enumerate(outputs):
            for value in values:
                if value.numel():
                    address = value.untyped_storage().data_ptr()
                    if address in owners:
                        reused.add(owners[address])
                    owners[address] = position
        parcel = TensorParcel(self.torch, self.staging, self.spec.segment_bytes)
        items = [
            {"position": position, "tensors": parcel.add(values), "reused": position in reused}
            for position, values in enumerate(outputs)
        ]
        parcel.send(self.channel, {"m": "outputs", **where, "items": items})

    def _call(self, model: Callable[..., Any], given: list[Any], flush: Any) -> Any:
        """One timed call (output in ``self.last``): its seconds, or on a GPU its events."""
        torch = self.torch
        if flush is not None:
            # L2 flushed on the call's stream, without waiting: the device runs the chunk back
            # to back, so the chunk's host time is the device's, not the launches'.
            stream = torch.cuda.current_stream(self.device)
            flush.zero_()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record(stream)
            self.last = model(*given)
            end.record(stream)
            return begin, end
        start = perf_counter()
        self.last = model(*given)
        return float(perf_counter() - start)

    def _claims(self, marks: list[Any]) -> list[float]:
        """The calls' in-process seconds (on a GPU by their events, the whole device done)."""
        if not self.cuda:
            return marks
        self.sync()
        return [float(begin.elapsed_time(end)) / 1000.0 for begin, end in marks]
