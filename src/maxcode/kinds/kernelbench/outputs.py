"""Outputs against the reference's, read where the worker left them: memory files sealed
against any write, shrink or growth (worker ``conversation.TensorParcel``; the seals are the
kernel's word that no process can change the bytes), checked by ``SealedFiles`` and mapped
``WINDOW_BYTES`` at a time (``SharedTensor``), so the parent's memory does not grow with the
outputs. ``Comparer`` compares dtype, shape and values within the dtype's tolerance: the checked
calls' outputs as they arrive (``CheckedOutputs``), the kept timed calls' pair by pair between
chunks (``TimedOutputs``), each let go once compared.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import stat
import threading
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from maxcode.kinds.kernelbench.parameters import CHECK_SEEDS, DEFAULT_TOLERANCE
from maxcode.kinds.kernelbench.worker.protocol import ALIGN, SEGMENT_BYTES

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.evidence import TensorHeader

WINDOW_BYTES = 16 << 20
"""Bytes of each side the parent maps at once."""
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_NEEDED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_PAGE = mmap.ALLOCATIONGRANULARITY
_SLICE = 1 << 16
"""Elements compared at a time within a window: a comparison's temporaries stay small enough
for the allocator to reuse."""


@dataclass(frozen=True)
class TensorPlace:
    """One tensor of a message's memory files (``at``: its place in the files concatenated)."""

    dtype: Any
    shape: tuple[int, ...]
    nbytes: int
    at: int


class SealedFiles:
    """The sealed memory files received with one message (``close``: every tensor read)."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = list(fds)
        self.sizes: list[int] = []
        try:
            for fd in self.fds:
                self.sizes.append(_sealed_size(fd))
        except ValueError:
            self.close()
            raise

    def tensors(self, headers: list[TensorHeader]) -> list[SharedTensor]:
        """The tensors ``headers`` place in these files (ValueError: they do not fit)."""
        import torch

        found = []
        for header in headers:
            dtype = getattr(torch, header.dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"a tensor of unknown dtype {header.dtype!r}")
            if math.prod(header.shape) * dtype.itemsize != header.nbytes:
                raise ValueError("a tensor whose byte count does not match its shape")
            found.append(
                self.tensor(TensorPlace(dtype, tuple(header.shape), header.nbytes, header.at))
            )
        return found

    def tensor(self, place: TensorPlace) -> SharedTensor:
        """The tensor at ``place``, once its bytes are known to lie inside the files."""
        if place.nbytes:
            if place.at % ALIGN:
                raise ValueError("an output that is not aligned in its memory")
            first, offset = divmod(place.at, SEGMENT_BYTES)
            last = (place.at + place.nbytes - 1) // SEGMENT_BYTES
            if offset + place.nbytes > SEGMENT_BYTES and offset:
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
    """A tensor in sealed memory files: its dtype and shape, its values a window at a time."""

    def __init__(self, files: SealedFiles, place: TensorPlace) -> None:
        self.files, self.place = files, place
        self.dtype, self.shape = place.dtype, place.shape

    def numel(self) -> int:
        return math.prod(self.shape)

    def is_floating_point(self) -> bool:
        return bool(self.dtype.is_floating_point)

    def window(self, start: int, count: int) -> Any:
        """Elements ``start`` to ``start + count``, a flat tensor over a read-only mapping."""
        import torch

        size = self.dtype.itemsize
        segment, offset = divmod(self.place.at + start * size, SEGMENT_BYTES)
        page = offset - offset % _PAGE
        if count == 0:
            return torch.empty(0, dtype=self.dtype)
        # Read-only (a private writable mapping would copy every page it populates).
        mapped = mmap.mmap(
            self.files.fds[segment],
            offset - page + count * size,
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
    """(start, flat slice) over a ``SharedTensor`` or a tensor, ``WINDOW_BYTES`` at a time."""
    count = value.numel()
    step = elements or max(min(WINDOW_BYTES, SEGMENT_BYTES) // value.dtype.itemsize, 1)
    if isinstance(value, SharedTensor):
        # Never two files: a tensor that spans several starts a segment; the step divides one.
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


class Comparer:
    """Outputs against the expected ones (tensors or ``SharedTensor``s), with the parent's torch."""

    def __init__(self, torch: Any, tolerance: float | None = None) -> None:
        self.torch = torch
        self.fixed = tolerance

    def outputs(self, expected: list[Any], got: list[Any]) -> str | None:
        """What is wrong with ``got`` (None: it matches ``expected``)."""
        if len(got) != len(expected):
            return f"{len(got)} outputs, expected {len(expected)}"
        for position, (want, have) in enumerate(zip(expected, got)):
            problem = self.one(want, have)
            if problem is not None:
                return (f"output {position}: " if len(expected) > 1 else "") + problem
        return None

    def agrees(self, expected: list[Any], got: list[Any]) -> bool:
        """``outputs`` finds nothing wrong, without its words (a pass in double precision)."""
        return len(got) == len(expected) and all(
            self._agrees_one(want, have) for want, have in zip(expected, got)
        )

    def _alike(self, want: Any, have: Any) -> bool:
        tensor = type(have) is self.torch.Tensor or isinstance(have, SharedTensor)
        return tensor and have.dtype == want.dtype and tuple(have.shape) == tuple(want.shape)

    def _agrees_one(self, want: Any, have: Any) -> bool:
        if not self._alike(want, have):
            return False
        tolerance = self.tolerance(want.dtype)
        floating = want.is_floating_point()
        for a, b in pairs(want, have):
            if self.torch.equal(a, b):
                continue
            if not floating or not _close(self.torch, b, a, tolerance):
                return False
        return True

    def near(self, value: Any, level: float) -> bool:
        """Every element of (floating) ``value`` within tolerance of ``level``."""
        tolerance = self.tolerance(value.dtype)
        return value.is_floating_point() and all(
            _close(self.torch, level, part, tolerance) for _, part in windows(value)
        )

    def near_constant(self, value: Any) -> bool:
        """Every element of (floating) ``value`` within tolerance of its mean (a first window
        spread beyond twice the tolerance says no without two passes over the whole output)."""
        if not value.is_floating_point():
            return False
        tolerance = self.tolerance(value.dtype)
        for _, part in windows(value):
            if part.numel():
                spread = float(part.max() - part.min())
                if spread > 2 * tolerance * (1 + float(part.abs().max())):
                    return False
            break
        total = sum(float(part.double().sum()) for _, part in windows(value))
        return self.near(value, total / max(value.numel(), 1))

    def unchanged(self, want: Any, have: Any) -> bool:
        """``have`` holds ``want``'s values exactly (NaN equal to NaN)."""
        torch = self.torch
        return self._alike(want, have) and all(
            torch.equal(a, b) or torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
            for a, b in pairs(want, have)
        )

    def one(self, want: Any, have: Any) -> str | None:
        if not (type(have) is self.torch.Tensor or isinstance(have, SharedTensor)):
            return f"a {type(have).__name__}, not a torch.Tensor"
        if have.dtype != want.dtype:
            return f"dtype {_dtype_name(have.dtype)}, expected {_dtype_name(want.dtype)}"
        if tuple(have.shape) != tuple(want.shape):
            return f"shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if self._agrees_one(want, have):
            return None
        if not want.is_floating_point():
            mismatched = sum(int((a != b).sum()) for a, b in pairs(want, have))
            return f"{mismatched} of {want.numel()} values differ (exact match needed)"
        tolerance = self.tolerance(want.dtype)
        bad, worst = 0, 0.0
        for a, b in pairs(want, have):
            difference = (b.double() - a.double()).abs()
            bound = tolerance + tolerance * a.double().abs()
            bad += int((~(difference <= bound) & ~(b.isnan() & a.isnan())).sum())
            if difference.numel():
                worst = max(worst, float(difference.nan_to_num(float("inf")).max()))
        return (
            f"{bad} of {want.numel()} values outside tolerance {tolerance:g} "
            f"(max abs diff {worst:.3g})"
        )

    def tolerance(self, dtype: Any) -> float:
        if self.fixed is not None:
            return self.fixed
        return DEFAULT_TOLERANCE.get(_dtype_name(dtype), 1e-2)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _close(torch: Any, have: Any, want: Any, tolerance: float) -> bool:
    """``allclose`` (NaN equal to NaN), slice by slice; ``have`` a flat tensor or one value."""
    for start in range(0, want.numel(), _SLICE):
        expected = want[start : start + _SLICE]
        if isinstance(have, float):
            got = torch.full_like(expected, have)
        else:
            got = have[start : start + _SLICE]
        if not torch.allclose(got, expected, atol=tolerance, rtol=tolerance, equal_nan=True):
            return False
    return True


KEYS = ("check", "again", "after")
"""Per check seed: the first call's outputs, the second's, the inputs after the first ([]:
unchanged)."""


@dataclass
class SeedVerdict:
    """The candidate's outputs of one check seed against the reference's (None: right)."""

    check: str | None
    inputs: tuple[str, str] | None
    """``inputs_problem``'s finding and problem."""
    again: str | None
    """The second call's outputs against the reference's first."""


@dataclass
class _Seed:
    values: dict[str, list[Any]]
    files: SealedFiles | None
    screened: bool = False
    settled: bool = False

    def release(self) -> None:
        self.values = {}
        if self.files is not None:
            self.files.close()


@dataclass
class CheckedOutputs:
    """The checked calls' outputs of both sides as they ``arrive``: ``settle`` screens the
    reference's (findings about the task) and compares each candidate seed once both sides' are
    in, then lets them go (the reference's first stays until all of its are screened)."""

    _compare: Comparer | None = None
    _held: dict[bool, dict[int, _Seed]] = field(default_factory=lambda: {True: {}, False: {}})
    _lock: threading.Lock = field(default_factory=threading.Lock)
    verdicts: dict[int, SeedVerdict] = field(default_factory=dict)
    _screen: defaultdict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))

    def compare_with(self, comparer: Comparer) -> None:
        with self._lock:
            self._compare = comparer
        self.settle()

    def arrive(
        self, reference: bool, seed: int, values: dict[str, list[Any]], files: SealedFiles | None
    ) -> None:
        with self._lock:
            if seed in self._held[reference]:
                raise ValueError(f"check seed {seed} twice")
            self._held[reference][seed] = _Seed(values, files)
        self.settle()

    def arrived(self, reference: bool) -> int:
        with self._lock:
            return len(self._held[reference])

    def settle(self) -> None:
        with self._lock:
            comparer = self._compare
            if comparer is None:
                return
            ours, theirs = self._held[True], self._held[False]
            for number, seed in sorted(ours.items()):
                if not seed.screened:
                    self._screen_one(comparer, number, seed, ours)
            for number, seed in sorted(theirs.items()):
                if not seed.settled and number in ours:
                    self.verdicts[number] = _verdict(comparer, ours[number], seed)
                    seed.settled = ours[number].settled = True
                    seed.release()
            done = len(self._screen["zero"]) == CHECK_SEEDS
            for number, seed in ours.items():
                if seed.settled and seed.screened and (number != 0 or done):
                    seed.release()

    def _screen_one(
        self, comparer: Comparer, number: int, seed: _Seed, ours: dict[int, _Seed]
    ) -> None:
        """What the reference's seed says of the task."""
        outputs, found = seed.values["check"], self._screen
        floating = bool(outputs) and all(value.is_floating_point() for value in outputs)
        found["zero"].append(not floating or all(comparer.near(value, 0.0) for value in outputs))
        found["constant"].append(
            not floating or all(comparer.near_constant(value) for value in outputs)
        )
        found["floating"].append(floating)
        first = ours.get(0)
        if number != 0 and first is not None and first.values:
            found["same"].append(comparer.agrees(first.values["check"], outputs))
        found["steady"].append(comparer.agrees(outputs, seed.values["again"]))
        found["inputs"].append(bool(seed.values["after"]))
        seed.values = {key: value for key, value in seed.values.items() if key != "again"}
        seed.screened = True

    def findings(self) -> list[str]:
        """Findings about the task itself, from the reference's outputs."""
        self.settle()
        found, words = self._screen, []
        if any(found["floating"]):
            if all(found["zero"]):
                words.append("an all-zeros output passes the tolerance")
            elif all(found["constant"]):
                words.append("a constant output passes the tolerance")
        if len(found["same"]) == CHECK_SEEDS - 1 and all(found["same"]):
            words.append("the output is the same for every input")
        if not all(found["steady"]):
            words.append("the reference disagrees with itself when run twice")
        if any(found["inputs"]):
            words.append("the reference changes its inputs in place")
        return words

    def close(self) -> None:
        with self._lock:
            for side in self._held.values():
                for seed in side.values():
                    seed.release()


def _verdict(comparer: Comparer, expected: _Seed, got: _Seed) -> SeedVerdict:
    want, have = expected.values, got.values
    return SeedVerdict(
        check=comparer.outputs(want["check"], have["check"]),
        inputs=inputs_problem(comparer, want["after"], have["after"]),
        again=comparer.outputs(want["check"], have["again"]),
    )


def inputs_problem(
    comparer: Comparer, expected: list[Any], got: list[Any]
) -> tuple[str, str] | None:
    """The finding and the problem when the candidate's inputs after the call are not the
    reference's ([]: as made)."""
    if got and not expected:
        return (
            "the candidate changed its inputs in place",
            "an input was changed by the call (inputs must stay unchanged)",
        )
    if len(got) != len(expected):
        return (
            "the candidate's inputs are not the reference's",
            "the inputs after the call are missing",
        )
    for position, (want, have) in enumerate(zip(expected, got)):
        if not comparer.unchanged(want, have):
            return (
                f"the candidate changed input {position} in place",
                f"input {position} was changed by the call (inputs must stay unchanged)",
            )
    return None


MISSING = "missing"

REUSED = (
    "its output was overwritten by a later call before it could be checked: the forward "
    "returns the same output buffer on every call; return a fresh tensor from each call"
)


class TimedOutputs:
    """The kept timed outputs of both sides as each ``hold``s them; ``settle`` compares every
    call both hold and lets go of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[bool, dict[int, tuple[list[Any], bool]]] = {True: {}, False: {}}
        """By side (True: the reference's), by position: the outputs, and ``reused``."""
        self._compare: Comparer | None = None
        self.problems: dict[int, str | None] = {}

    def compare_with(self, comparer: Comparer) -> None:
        self._compare = comparer

    def hold(self, reference: bool, position: int, values: list[Any], reused: bool) -> None:
        with self._lock:
            self._held[reference][position] = (values, reused)

    def held(self, reference: bool) -> int:
        with self._lock:
            return len(self._held[reference])

    def settle(self) -> None:
        with self._lock:
            if self._compare is None:
                return
            want, have = self._held[True], self._held[False]
            for position in sorted(set(want) & set(have)):
                (expected, _), (got, reused) = want.pop(position), have.pop(position)
                problem = self._compare.outputs(expected, got)
                self.problems[position] = REUSED if problem and reused else problem

    def verdicts(self, positions: list[int]) -> list[tuple[int, str | None]]:
        """Each kept position's comparison, in order (``MISSING``: a side's never came)."""
        self.settle()
        return [(position, self.problems.get(position, MISSING)) for position in positions]

    def close(self) -> None:
        with self._lock:
            for side in self._held.values():
                side.clear()
