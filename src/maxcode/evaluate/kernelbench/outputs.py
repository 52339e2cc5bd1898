"""Outputs against the reference's: the comparison (``Comparison``: dtype, shape, values within
the dtype's tolerance) and the kept outputs of the timed calls, compared pair by pair while the
window is still open (``TimedOutputs``).

Why pair by pair. The parent keeps up to ``SAMPLED_OUTPUTS`` timed outputs of each side, drawn
after the calls ran. Held until the judgement, each needed memory of its own, and memory the
parent had not touched lately was slow to fault in on this project's VM (free pages are handed
back to the host): for the scaled ``level1/21_Sigmoid`` (64 MB outputs, one call a chunk) the
parent spent 130-220 ms per chunk touching fresh memory for the outputs to land in, 3-4 s of a
round's 20 s, and held 1.3 GB. Compared as soon as both sides' outputs of a call are in (when
the reference asks for its next chunk: both workers wait then, so no one's time is taken), a
side's kept outputs never outlive the next chunk, and one landing per side serves every chunk
(``Conversation._landing``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from maxcode.evaluate.kernelbench.settings import DEFAULT_TOLERANCE

_SLICE = 1 << 16
"""Elements compared at a time: a comparison's temporaries stay small enough for the
allocator to reuse (whole-tensor temporaries of a large output cost page faults each time)."""


class Comparison:
    """One output list against the expected one, with the parent's own torch."""

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
        """``outputs`` finds nothing wrong, without the words: on a mismatch of large outputs,
        the words (counts and the largest difference in double precision) cost the task's
        screen seconds (the scaled ``level1/21_Sigmoid``: 2.4 s of a round's judgement)."""
        return len(got) == len(expected) and all(
            self._agrees_one(want, have) for want, have in zip(expected, got)
        )

    def _agrees_one(self, want: Any, have: Any) -> bool:
        torch = self.torch
        if type(have) is not torch.Tensor or have.dtype != want.dtype or have.shape != want.shape:
            return False
        if torch.equal(have, want):
            return True
        return want.is_floating_point() and _close(torch, have, want, self.tolerance(want.dtype))

    def near_constant(self, expected: list[Any], fill: Callable[[Any], float]) -> bool:
        """Every (floating) output within tolerance of one value, ``fill(output)``, without
        making an output of it."""
        return all(
            want.is_floating_point()
            and _close(self.torch, float(fill(want)), want, self.tolerance(want.dtype))
            for want in expected
        )

    def one(self, want: Any, have: Any) -> str | None:
        torch = self.torch
        if type(have) is not torch.Tensor:
            return f"a {type(have).__name__}, not a torch.Tensor"
        if have.dtype != want.dtype:
            return f"dtype {str(have.dtype).removeprefix('torch.')}, expected " + str(
                want.dtype
            ).removeprefix("torch.")
        if have.shape != want.shape:
            return f"shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if self._agrees_one(want, have):
            return None
        if not want.is_floating_point():
            mismatched = int((have != want).sum())
            return f"{mismatched} of {want.numel()} values differ (exact match needed)"
        tolerance = self.tolerance(want.dtype)
        difference = (have.double() - want.double()).abs()
        bound = tolerance + tolerance * want.double().abs()
        bad = ~(difference <= bound) & ~(have.isnan() & want.isnan())
        worst = float(difference.nan_to_num(float("inf")).max())
        return (
            f"{int(bad.sum())} of {want.numel()} values outside tolerance {tolerance:g} "
            f"(max abs diff {worst:.3g})"
        )

    def tolerance(self, dtype: Any) -> float:
        if self.fixed is not None:
            return self.fixed
        return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-2)


def _close(torch: Any, have: Any, want: Any, tolerance: float) -> bool:
    """``allclose`` (NaN equal to NaN), slice by slice; ``have`` a tensor or one value."""
    want = want.reshape(-1)
    if isinstance(have, float):
        value = have

        def part(start: int) -> Any:
            return torch.full_like(want[start : start + _SLICE], value)
    else:
        flat = have.reshape(-1)

        def part(start: int) -> Any:
            return flat[start : start + _SLICE]

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


MISSING = "missing"
"""``TimedOutputs.verdicts``: a kept call whose output one side never sent."""


class TimedOutputs:
    """The kept outputs of the timed calls of both sides (see the module's docstring), shared
    by the two conversations: each ``hold``s its kept outputs, ``settle`` compares every call
    both sides hold (the candidate's against the reference's) and lets go of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[bool, dict[int, list[Any]]] = {True: {}, False: {}}
        """By side (True: the reference's), by position."""
        self._compare: Callable[[list[Any], list[Any]], str | None] | None = None
        self.problems: dict[int, str | None] = {}
        """Compared calls by position: what was wrong with the candidate's output, or None."""

    def compare_with(self, comparison: Comparison) -> None:
        """From now on ``settle`` compares (the parent's torch is imported)."""
        self._compare = comparison.outputs

    def hold(self, reference: bool, position: int, values: list[Any]) -> None:
        with self._lock:
            self._held[reference][position] = values

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
                self.problems[position] = self._compare(want.pop(position), have.pop(position))

    def verdicts(self, positions: list[int]) -> list[tuple[int, str | None]]:
        """Each kept position's comparison, in order (``MISSING`` where a side's output never
        came), everything held settled first."""
        self.settle()
        return [(position, self.problems.get(position, MISSING)) for position in positions]
