"""Comparing a program's output with the expected output, PIE style.

Line by line, trailing whitespace and trailing blank lines ignored. A line matches when it is
the same text, or when it splits into the same number of tokens and every token is the same
text or both are numbers within an absolute tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NUMBER_TOLERANCE = 1e-3
_EXCERPT = 120


@dataclass(frozen=True)
class Comparison:
    """Whether an output matches, and where it first does not."""

    matches: bool
    """Every line matched."""
    detail: str = ""
    """The first difference, expected against got (bounded); empty when it matches."""


def compare_output(expected: bytes, got: bytes, tolerance: float = NUMBER_TOLERANCE) -> Comparison:
    """Compare ``got`` with ``expected``."""
    if expected == got:
        return Comparison(True)
    want = _lines(expected)
    have = _lines(got)
    for number, (line_want, line_have) in enumerate(zip(want, have), start=1):
        if not _line_matches(line_want, line_have, tolerance):
            return Comparison(
                False, f"line {number}: expected {_excerpt(line_want)}, got {_excerpt(line_have)}"
            )
    if len(have) < len(want):
        return Comparison(
            False,
            f"output ended after {len(have)} lines; expected {len(want)}"
            f" (next expected line: {_excerpt(want[len(have)])})",
        )
    if len(have) > len(want):
        return Comparison(
            False,
            f"{len(have) - len(want)} extra lines after the expected {len(want)}"
            f" (first extra: {_excerpt(have[len(want)])})",
        )
    return Comparison(True)


def _lines(data: bytes) -> list[str]:
    lines = [line.rstrip() for line in data.decode("utf-8", errors="replace").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_matches(want: str, have: str, tolerance: float) -> bool:
    if want == have:
        return True
    want_tokens, have_tokens = want.split(), have.split()
    if len(want_tokens) != len(have_tokens):
        return False
    return all(_token_matches(a, b, tolerance) for a, b in zip(want_tokens, have_tokens))


def _token_matches(want: str, have: str, tolerance: float) -> bool:
    if want == have:
        return True
    try:
        a, b = float(want), float(have)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return False
    return abs(a - b) <= tolerance


def _excerpt(line: str) -> str:
    if len(line) > _EXCERPT:
        line = line[:_EXCERPT] + "…"
    return repr(line)
