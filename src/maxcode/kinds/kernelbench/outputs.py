"""Outputs against the reference's, where they lie (``shared``: sealed memory files the parent
maps a window at a time): the comparison (``Comparison``: dtype, shape, values within the
dtype's tolerance), the checked calls' outputs compared as they arrive (``CheckedOutputs``),
and the kept outputs of the timed calls compared pair by pair between chunks
(``TimedOutputs``). Both let go of outputs once compared, so a few are held at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from maxcode.kinds.kernelbench.settings import CHECK_SEEDS, DEFAULT_TOLERANCE
from maxcode.kinds.kernelbench.shared import Pack, SharedTensor, pairs, windows

_SLICE = 1 << 16
"""Elements compared at a time within a window: a comparison's temporaries stay small enough
for the allocator to reuse."""


class Comparison:
    """One output list against the expected one, with the parent's own torch; values are
    torch tensors or ``SharedTensor``s, read a window at a time."""

    def __init__(self, torch: Any, tolerance: float | None = None) -> None:
        self.torch = torch
        self.fixed = tolerance
        """atol = rtol for floating outputs (None: by dtype, ``DEFAULT_TOLERANCE``)."""

    def outputs(self, expected: list[Any], got: list[Any]) -> str | None:
        """What is wrong with ``got`` (None: it matches ``expected``)."""
        if len(got) != len(expected):
            return f"{len(got)} outputs, expected {len(expected)}"
        for position, (want, have) in enumerate(zip(expected, got)):
            problem = self.one(want, have)
            if problem is not None:
                where = f"output {position}: " if len(expected) > 1 else ""
                return where + problem
        return None

    def agrees(self, expected: list[Any], got: list[Any]) -> bool:
        """``outputs`` finds nothing wrong, without the words (which cost a pass in double
        precision over a large output)."""
        return len(got) == len(expected) and all(
            self._agrees_one(want, have) for want, have in zip(expected, got)
        )

    def _tensor(self, value: Any) -> bool:
        return type(value) is self.torch.Tensor or isinstance(value, SharedTensor)

    def _agrees_one(self, want: Any, have: Any) -> bool:
        if (
            not self._tensor(have)
            or have.dtype != want.dtype
            or tuple(have.shape) != tuple(want.shape)
        ):
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
        """Every element of (floating) ``value`` within tolerance of one value, its mean. A
        first window whose spread no single value's tolerance covers says no at once (two
        elements within tolerance of one value differ by at most twice it), without the two
        passes over the whole output."""
        if not value.is_floating_point():
            return False
        tolerance = self.tolerance(value.dtype)
        for _, part in windows(value):
            if part.numel():
                spread = float(part.max() - part.min())
                if spread > 2 * tolerance * (1 + float(part.abs().max())):
                    return False
            break
        return self.near(value, self.mean(value))

    def mean(self, value: Any) -> float:
        """The mean of ``value``'s elements, in double precision."""
        total = sum(float(part.double().sum()) for _, part in windows(value))
        return total / max(value.numel(), 1)

    def unchanged(self, want: Any, have: Any) -> bool:
        """``have`` holds ``want``'s values exactly (NaN equal to NaN)."""
        torch = self.torch
        if (
            not self._tensor(have)
            or have.dtype != want.dtype
            or tuple(have.shape) != tuple(want.shape)
        ):
            return False
        return all(
            torch.equal(a, b) or torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
            for a, b in pairs(want, have)
        )

    def one(self, want: Any, have: Any) -> str | None:
        if not self._tensor(have):
            return f"a {type(have).__name__}, not a torch.Tensor"
        if have.dtype != want.dtype:
            return f"dtype {str(have.dtype).removeprefix('torch.')}, expected " + str(
                want.dtype
            ).removeprefix("torch.")
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
        return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-2)


def _close(torch: Any, have: Any, want: Any, tolerance: float) -> bool:
    """``allclose`` (NaN equal to NaN), slice by slice; ``have`` a flat tensor or one value."""
    if isinstance(have, float):
        value = have

        def part(start: int) -> Any:
            return torch.full_like(want[start : start + _SLICE], value)
    else:

        def part(start: int) -> Any:
            return have[start : start + _SLICE]

    return all(
        torch.allclose(
            part(start),
            want[start : start + _SLICE],
            atol=tolerance,
            rtol=tolerance,
            equal_nan=True,
        )
        for start in range(0, want.numel(), _SLICE)
    )


KEYS = ("check", "again", "after")
"""What a worker sends per check seed: its first call's outputs, its second call's, and its
inputs after the first call ([] when the call left them as they were made)."""


@dataclass
class SeedVerdict:
    """The candidate's outputs of one check seed against the reference's."""

    check: str | None
    """What is wrong with its first call's outputs (None: right)."""
    inputs: tuple[str, str] | None
    """The finding and the problem when its call changed its inputs (None: unchanged)."""
    again: str | None
    """What is wrong with its second call's outputs, against the reference's first."""


@dataclass
class _Seed:
    values: dict[str, list[Any]]
    pack: Pack | None
    screened: bool = False
    settled: bool = False


@dataclass
class CheckedOutputs:
    """The checked calls' outputs of both sides, shared by their conversations: each side's
    seeds ``arrive`` as the worker sends them; ``settle`` screens the reference's (findings
    about the task) and compares the candidate's with the reference's as soon as both sides'
    of a seed are in, then lets them go (the reference's first seed stays until all of its
    are screened)."""

    _compare: Comparison | None = None
    _held: dict[bool, dict[int, _Seed]] = field(default_factory=lambda: {True: {}, False: {}})
    _lock: threading.Lock = field(default_factory=threading.Lock)
    verdicts: dict[int, SeedVerdict] = field(default_factory=dict)
    """The candidate's seeds, once compared."""
    _screen: dict[str, list[bool]] = field(default_factory=dict)

    def compare_with(self, comparison: Comparison) -> None:
        """From now on ``settle`` compares (the parent's torch is imported)."""
        with self._lock:
            self._compare = comparison
        self.settle()

    def arrive(
        self, reference: bool, seed: int, values: dict[str, list[Any]], pack: Pack | None
    ) -> None:
        with self._lock:
            if seed in self._held[reference]:
                raise ValueError(f"check seed {seed} twice")
            self._held[reference][seed] = _Seed(values, pack)
        self.settle()

    def arrived(self, reference: bool) -> int:
        """Check seeds of one side in so far."""
        with self._lock:
            return len(self._held[reference])

    def settle(self) -> None:
        with self._lock:
            comparison = self._compare
            if comparison is None:
                return
            ours, theirs = self._held[True], self._held[False]
            for number, seed in sorted(ours.items()):
                if not seed.screened:
                    self._screen_one(comparison, number, seed, ours)
            for number, seed in sorted(theirs.items()):
                if not seed.settled and number in ours:
                    self.verdicts[number] = _verdict(comparison, ours[number], seed)
                    seed.settled = ours[number].settled = True
                    seed.values = {}
                    if seed.pack is not None:
                        seed.pack.close()
            done = len(self._screen.get("zero", [])) == CHECK_SEEDS
            for number, seed in ours.items():
                if seed.settled and seed.screened and (number != 0 or done):
                    seed.values = {}
                    if seed.pack is not None:
                        seed.pack.close()

    def _screen_one(
        self, comparison: Comparison, number: int, seed: _Seed, ours: dict[int, _Seed]
    ) -> None:
        """What the reference's seed says of the task; its second call is let go."""
        outputs = seed.values["check"]
        found = self._screen
        floating = bool(outputs) and all(value.is_floating_point() for value in outputs)
        found.setdefault("zero", []).append(
            not floating or all(comparison.near(value, 0.0) for value in outputs)
        )
        found.setdefault("constant", []).append(
            not floating or all(comparison.near_constant(value) for value in outputs)
        )
        found.setdefault("floating", []).append(floating)
        first = ours.get(0)
        if number != 0 and first is not None and first.values:
            found.setdefault("same", []).append(comparison.agrees(first.values["check"], outputs))
        found.setdefault("steady", []).append(comparison.agrees(outputs, seed.values["again"]))
        found.setdefault("inputs", []).append(bool(seed.values["after"]))
        seed.values = {key: value for key, value in seed.values.items() if key != "again"}
        seed.screened = True

    def findings(self) -> list[str]:
        """Findings about the task itself, from the reference's outputs (settled first)."""
        self.settle()
        found, words = self._screen, []
        if any(found.get("floating", [])):
            if all(found.get("zero", [False])):
                words.append("an all-zeros output passes the tolerance")
            elif all(found.get("constant", [False])):
                words.append("a constant output passes the tolerance")
        same = found.get("same", [])
        if len(same) == CHECK_SEEDS - 1 and all(same):
            words.append("the output is the same for every input")
        if not all(found.get("steady", [True])):
            words.append("the reference disagrees with itself when run twice")
        if any(found.get("inputs", [])):
            words.append("the reference changes its inputs in place")
        return words

    def close(self) -> None:
        """Lets go of everything still held."""
        with self._lock:
            for side in self._held.values():
                for seed in side.values():
                    seed.values = {}
                    if seed.pack is not None:
                        seed.pack.close()


def _verdict(comparison: Comparison, expected: _Seed, got: _Seed) -> SeedVerdict:
    want, have = expected.values, got.values
    return SeedVerdict(
        check=comparison.outputs(want["check"], have["check"]),
        inputs=inputs_problem(comparison, want["after"], have["after"]),
        again=comparison.outputs(want["check"], have["again"]),
    )


def inputs_problem(
    comparison: Comparison, expected: list[Any], got: list[Any]
) -> tuple[str, str] | None:
    """The finding and the problem when the candidate's inputs after the call are not the
    reference's (each side sends them only when its call changed them: [] is 'as made')."""
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
        if not comparison.unchanged(want, have):
            return (
                f"the candidate changed input {position} in place",
                f"input {position} was changed by the call (inputs must stay unchanged)",
            )
    return None


MISSING = "missing"
"""``TimedOutputs.verdicts``: a kept call whose output one side never sent."""

REUSED = (
    "its output was overwritten by a later call before it could be checked: the forward "
    "returns the same output buffer on every call; return a fresh tensor from each call"
)
"""The problem of a kept timed output whose buffer a later call of its chunk wrote again."""


class TimedOutputs:
    """The kept outputs of the timed calls of both sides, shared by the two conversations:
    each ``hold``s its kept outputs, ``settle`` compares every call both sides hold (the
    candidate's against the reference's) and lets go of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[bool, dict[int, tuple[list[Any], bool]]] = {True: {}, False: {}}
        """By side (True: the reference's), by position: the outputs, and whether a later
        call of the chunk returned the same buffer (the worker's word)."""
        self._compare: Callable[[list[Any], list[Any]], str | None] | None = None
        self.problems: dict[int, str | None] = {}
        """Compared calls by position: what was wrong with the candidate's output, or None."""

    def compare_with(self, comparison: Comparison) -> None:
        """From now on ``settle`` compares (the parent's torch is imported)."""
        self._compare = comparison.outputs

    def hold(self, reference: bool, position: int, values: list[Any], reused: bool) -> None:
        with self._lock:
            self._held[reference][position] = (values, reused)

    def held(self, reference: bool) -> int:
        """Outputs of one side still held (not compared yet)."""
        with self._lock:
            return len(self._held[reference])

    def settle(self) -> None:
        """Compares every call both sides hold, and drops their outputs (nothing before
        ``compare_with``)."""
        with self._lock:
            if self._compare is None:
                return
            want, have = self._held[True], self._held[False]
            for position in sorted(set(want) & set(have)):
                (expected, _), (got, reused) = want.pop(position), have.pop(position)
                problem = self._compare(expected, got)
                self.problems[position] = REUSED if problem and reused else problem

    def verdicts(self, positions: list[int]) -> list[tuple[int, str | None]]:
        """Each kept position's comparison, in order (``MISSING`` where a side's output never
        came), everything held settled first."""
        self.settle()
        return [(position, self.problems.get(position, MISSING)) for position in positions]

    def close(self) -> None:
        with self._lock:
            for side in self._held.values():
                side.clear()
