"""Outputs the parent reads where the worker left them: sealed memory files, mapped a window
at a time.

A worker copies each output it hands over (the checked calls' outputs and changed inputs, the
timed calls' outputs) into anonymous memory files (``memfd_create``), seals them against any
write, shrink or growth, and passes their descriptors on descriptor 3 (``SCM_RIGHTS``) beside a
JSON header that says where each tensor lies. No output byte crosses the channel, and the
parent never holds an output in its own memory: it maps ``WINDOW_BYTES`` of each side at a
time, compares, and lets the window go, so its peak memory does not grow with the output's
size. The seals are the kernel's word that the bytes the parent reads are the bytes the
worker sealed: no process, the candidate's included, can change them after the seal (a
writable shared mapping left open makes the seal fail), so nothing the candidate leaves
running can change an output while the parent reads it.

Layout (the worker's ``channel.Pack`` lays it out, ``Pack.tensor`` checks it): tensors lie in
segments of ``SEGMENT_BYTES`` (one memory file each; a worker's file-size limit bounds one
file), each at a position in the concatenation of the segments, aligned to ``ALIGN``; a tensor
that fits the rest of a segment lies in it, a larger one starts a fresh segment and fills as
many whole ones as it needs.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from maxcode.kinds.kernelbench.worker.protocol import ALIGN, SEGMENT_BYTES

WINDOW_BYTES = 16 << 20
"""Bytes of each side the parent maps at once."""
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
"""The seals a memory file must carry (``F_SEAL_SEAL`` so that none can be lifted either)."""
_NEEDED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_PAGE = mmap.ALLOCATIONGRANULARITY


@dataclass(frozen=True)
class TensorPlace:
    """One tensor of a pack, as its header says (checked against the pack)."""

    dtype: Any
    """The torch dtype."""
    shape: tuple[int, ...]
    nbytes: int
    at: int
    """Position in the pack's segments, concatenated."""


class Pack:
    """Sealed memory files received in one message; ``close`` lets them go (every tensor read
    from it must be done by then)."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = list(fds)
        self.sizes: list[int] = []
        try:
            for fd in self.fds:
                self.sizes.append(_sealed_size(fd))
        except ValueError:
            self.close()
            raise

    def tensor(self, place: TensorPlace) -> SharedTensor:
        """The tensor at ``place``, once its bytes are known to lie inside the pack
        (ValueError: the header does not fit the files)."""
        if place.nbytes:
            if place.at % ALIGN:
                raise ValueError("an output that is not aligned in its memory")
            first, offset = divmod(place.at, SEGMENT_BYTES)
            spans = offset + place.nbytes > SEGMENT_BYTES
            last = (place.at + place.nbytes - 1) // SEGMENT_BYTES
            if spans and offset:
                raise ValueError("an output that straddles two memory files")
            if last >= len(self.fds):
                raise ValueError("an output beyond the memory files sent with it")
            for segment in range(first, last + 1):
                end = min(place.at + place.nbytes - segment * SEGMENT_BYTES, SEGMENT_BYTES)
                if self.sizes[segment] < end:
                    raise ValueError("an output beyond the end of its memory file")
        return SharedTensor(self, place)

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())

    def __del__(self) -> None:
        self.close()


def _sealed_size(fd: int) -> int:
    """The size of a memory file sealed against writes (ValueError: not one)."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        info = os.fstat(fd)
    except OSError:
        raise ValueError("an output memory that is not a sealed memory file") from None
    if seals & _NEEDED != _NEEDED or not stat.S_ISREG(info.st_mode):
        raise ValueError("an output memory that is not sealed against writes")
    return int(info.st_size)


class SharedTensor:
    """A tensor in a pack: its dtype and shape, and its values a window at a time."""

    def __init__(self, pack: Pack, place: TensorPlace) -> None:
        self.pack, self.place = pack, place
        self.dtype, self.shape = place.dtype, place.shape

    def numel(self) -> int:
        return math.prod(self.shape)

    def is_floating_point(self) -> bool:
        return bool(self.dtype.is_floating_point)

    def window(self, start: int, count: int) -> Any:
        """Elements ``start`` to ``start + count`` as a flat torch tensor over a mapping of
        their own pages (read-only to the file; unmapped once the tensor is gone)."""
        import torch

        size = self.dtype.itemsize
        begin = self.place.at + start * size
        segment, offset = divmod(begin, SEGMENT_BYTES)
        page = offset - offset % _PAGE
        length = offset - page + count * size
        if count == 0:
            return torch.empty(0, dtype=self.dtype)
        # Read-only (a private writable mapping would copy every page it populates), so the
        # window's tensor must never be written: the comparisons only read.
        mapped = mmap.mmap(
            self.pack.fds[segment],
            length,
            flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
            prot=mmap.PROT_READ,
            offset=page,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            raw = torch.frombuffer(
                mapped, dtype=torch.uint8, count=count * size, offset=offset - page
            )
        return raw.view(self.dtype)


def windows(value: Any, elements: int | None = None) -> Iterator[tuple[int, Any]]:
    """(start, flat slice) over ``value`` (a ``SharedTensor`` or a torch tensor), at most
    ``elements`` elements a slice (``WINDOW_BYTES`` worth by default)."""
    count = value.numel()
    step = elements or max(min(WINDOW_BYTES, SEGMENT_BYTES) // value.dtype.itemsize, 1)
    if isinstance(value, SharedTensor):
        # A window never straddles two memory files: the tensor starts a segment when it
        # spans several, and the step divides a segment.
        for start in range(0, count, step):
            yield start, value.window(start, min(step, count - start))
        return
    flat = value.reshape(-1)
    for start in range(0, count, step):
        yield start, flat[start : start + step]


def pairs(want: Any, have: Any) -> Iterator[tuple[Any, Any]]:
    """The same windows of two values of one dtype and shape, side by side."""
    for (_, a), (_, b) in zip(windows(want), windows(have)):
        yield a, b
