"""Outputs against the reference's: the one comparison the judge makes, for the check seeds
and for the timed calls (the latter as their outputs arrive, ``channel.Conversation``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maxcode.evaluate.kernelbench.settings import DEFAULT_TOLERANCE

_SLICE = 1 << 16
"""Elements compared at a time: a comparison's temporaries stay small enough for the
allocator to reuse (whole-tensor temporaries of a large output cost page faults each time)."""


@dataclass(frozen=True)
class Comparison:
    """``tolerance``: atol = rtol for every floating output (None: ``DEFAULT_TOLERANCE`` by
    dtype)."""

    tolerance: float | None = None

    def outputs(self, expected: list[Any], got: list[Any], explain: bool = True) -> str | None:
        """None when ``got`` matches ``expected``, else what differs (``explain``: counted
        and measured; otherwise just "differs", without the whole-tensor temporaries)."""
        if len(got) != len(expected):
            return f"{len(got)} outputs, expected {len(expected)}"
        for position, (want, have) in enumerate(zip(expected, got)):
            problem = self.one(want, have, explain)
            if problem is not None:
                where = f"output {position}: " if len(expected) > 1 else ""
                return where + problem
        return None

    def one(self, want: Any, have: Any, explain: bool = True) -> str | None:
        import torch

        if type(have) is not torch.Tensor:
            return f"a {type(have).__name__}, not a torch.Tensor"
        if have.dtype != want.dtype:
            return f"dtype {str(have.dtype).removeprefix('torch.')}, expected " + str(
                want.dtype
            ).removeprefix("torch.")
        if have.shape != want.shape:
            return f"shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if torch.equal(have, want):
            return None
        if not explain and not want.is_floating_point():
            return "differs"
        if not want.is_floating_point():
            mismatched = int((have != want).sum())
            return f"{mismatched} of {want.numel()} values differ (exact match needed)"
        tolerance = self.of(want.dtype)
        if _close(torch, have, want, tolerance):
            return None
        if not explain:
            return "differs"
        difference = (have.double() - want.double()).abs()
        bound = tolerance + tolerance * want.double().abs()
        bad = ~(difference <= bound) & ~(have.isnan() & want.isnan())
        worst = float(difference.nan_to_num(float("inf")).max())
        return (
            f"{int(bad.sum())} of {want.numel()} values outside tolerance {tolerance:g} "
            f"(max abs diff {worst:.3g})"
        )

    def of(self, dtype: Any) -> float:
        """The tolerance for outputs of ``dtype``."""
        if self.tolerance is not None:
            return self.tolerance
        return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-2)


def _close(torch: Any, have: Any, want: Any, tolerance: float) -> bool:
    """``allclose`` (NaN equal to NaN), slice by slice."""
    have, want = have.reshape(-1), want.reshape(-1)
    return all(
        torch.allclose(
            have[start : start + _SLICE],
            want[start : start + _SLICE],
            atol=tolerance,
            rtol=tolerance,
            equal_nan=True,
        )
        for start in range(0, want.numel(), _SLICE)
    )
