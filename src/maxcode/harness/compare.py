"""Comparing a program's output with the expected output, PIE style.

Outputs are compared as bytes, line by line: line ends may be ``\\n``, ``\\r\\n`` or ``\\r``;
trailing whitespace on a line and trailing blank lines are ignored. A line matches when it is
the same text, or when it splits (at ASCII whitespace) into as many tokens as expected and
every token matches:

- a token that is the same text matches;
- an expected **integer** (ASCII digits with an optional sign: ``42``, ``-7``,
  ``12345678901234567890``) matches only the same text. Integers are exact at any size, and
  ``42.0009``, ``42.0``, ``+42`` and ``042`` are all different answers to ``42`` (a program
  that should print an integer prints it one way; nothing is converted, so no size limit and
  no rounding applies);
- an expected **real number** (``0.5``, ``-3.25``, ``1e-9``, ``6.02E+23``: digits, then a
  fraction, an exponent or both) matches a produced integer or real number ``b`` when
  ``|a - b| <= max(abs_tol, rel_tol * |a|)``, ``a`` being the expected value: absolute *or*
  relative error within bounds, as judges state it. With both tolerances 0 the values must be
  equal as exact decimals (``0.50`` matches ``0.5``);
- anything else (``inf``, ``nan``, ``0x10``, ``1_000``, ``.5``, ``5.``, digits outside ASCII,
  a real number beyond the range of a double such as ``1e400``) matches only the same text.

The cost is linear in the sizes of both outputs and the memory is bounded by the expected
output: a produced output is read line by line and token by token, and the comparison stops
at the first difference.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

from maxcode.tasks.model import FLOAT_ABS_TOL, FLOAT_REL_TOL

_EXCERPT = 120
_INTEGER = re.compile(rb"[+-]?[0-9]+")
_REAL = re.compile(rb"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TOKEN = re.compile(rb"[^ \t\n\r\x0b\x0c]+")
_NOT_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class Comparison:
    """Whether an output matches, and where it first does not."""

    matches: bool
    """Every line matched."""
    detail: str = ""
    """The first difference, expected against got (bounded); empty when it matches."""


@dataclass(frozen=True)
class _Tolerance:
    absolute: float
    relative: float


def compare_output(
    expected: bytes, got: bytes, *, abs_tol: float = FLOAT_ABS_TOL, rel_tol: float = FLOAT_REL_TOL
) -> Comparison:
    """Compare ``got`` with ``expected`` by the module's rules; ``abs_tol`` and ``rel_tol`` apply
    to real numbers only (``0 <= abs_tol``, ``0 <= rel_tol < 1``)."""
    if not (0 <= abs_tol < math.inf and 0 <= rel_tol < 1):
        raise ValueError(f"tolerances out of range: abs_tol={abs_tol!r}, rel_tol={rel_tol!r}")
    if expected == got:
        return Comparison(True)
    tolerance = _Tolerance(abs_tol, rel_tol)
    want = _expected_lines(expected)
    have = _LineReader(got)
    last_written = 0  # the last line of ``got`` that is not blank
    for number, line_want in enumerate(want, start=1):
        line_have = have.next_line()
        if line_have is None:
            return _ended(want, last_written)
        if line_have:
            last_written = number
        reason = _line_difference(line_want, line_have, tolerance)
        if reason is None:
            continue
        if not line_have and have.rest_is_blank():
            return _ended(want, last_written)
        return Comparison(
            False,
            f"line {number}: expected {_excerpt(line_want)}, got {_excerpt(line_have)}{reason}",
        )
    if not have.rest_is_blank():
        extra = have.lines_left()
        first = have.next_line()
        while not first:  # the rest is not blank, so a written line comes
            first = have.next_line()
        return Comparison(
            False,
            f"{extra} extra lines after the expected {len(want)}"
            f" (first written: {_excerpt(first)})",
        )
    return Comparison(True)


def _ended(want: list[bytes], count: int) -> Comparison:
    return Comparison(
        False,
        f"output ended after {count} lines; expected {len(want)}"
        f" (next expected line: {_excerpt(want[count])})",
    )


def _expected_lines(data: bytes) -> list[bytes]:
    lines = [line.rstrip() for line in data.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


class _LineReader:
    """The produced output's lines one at a time, so that an output far longer than expected
    costs no more memory than the output itself."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def next_line(self) -> bytes | None:
        if self._pos >= len(self._data):
            return None
        end = _LINE_END.search(self._data, self._pos)
        if end is None:
            line, self._pos = self._data[self._pos :], len(self._data)
        else:
            line, self._pos = self._data[self._pos : end.start()], end.end()
        return line.rstrip()

    def rest_is_blank(self) -> bool:
        """Nothing but whitespace after the lines read so far."""
        return _NOT_SPACE.search(self._data, self._pos) is None

    def lines_left(self) -> int:
        """Lines after those read so far, trailing blank lines not counted."""
        rest = self._data[self._pos :].rstrip()
        if not rest:
            return 0
        return rest.count(b"\n") + rest.count(b"\r") - rest.count(b"\r\n") + 1


def _line_difference(want: bytes, have: bytes, tolerance: _Tolerance) -> str | None:
    """None when the lines match; else why not ("" when the excerpts say it all)."""
    if want == have:
        return None
    produced = _TOKEN.finditer(have)
    for position, token_want in enumerate(want.split(), start=1):
        token_have = next(produced, None)
        if token_have is None:
            return ""
        reason = _token_difference(token_want, token_have.group(), tolerance)
        if reason is not None:
            return f" (token {position}: {reason})" if reason else ""
    if next(produced, None) is not None:
        return ""
    return None


def _token_difference(want: bytes, have: bytes, tolerance: _Tolerance) -> str | None:
    """None when the tokens match; else why not ("" when the text says it all)."""
    if want == have:
        return None
    if _INTEGER.fullmatch(want):
        if _REAL.fullmatch(have) and not _INTEGER.fullmatch(have):
            return "an integer is expected, and integers match only exactly"
        return ""
    if not (_REAL.fullmatch(want) and _REAL.fullmatch(have)):
        return ""
    if tolerance.absolute == 0 and tolerance.relative == 0:
        return None if _exactly_equal(want, have) else ""
    a, b = float(want), float(have)
    if not (math.isfinite(a) and math.isfinite(b)):
        return "beyond the range of a double, so compared as text"
    allowed = max(tolerance.absolute, tolerance.relative * abs(a))
    off = abs(a - b)
    if off <= allowed:
        return None
    return f"off by {off:.3g}, more than the tolerance {allowed:.3g}"


def _exactly_equal(want: bytes, have: bytes) -> bool:
    try:
        return Decimal(want.decode("ascii")) == Decimal(have.decode("ascii"))
    except ArithmeticError:  # an exponent beyond what Decimal represents
        return False


def _excerpt(line: bytes) -> str:
    text = line[: _EXCERPT * 4].decode("utf-8", errors="replace")
    if len(text) > _EXCERPT or len(line) > _EXCERPT * 4:
        text = text[:_EXCERPT] + "…"
    return repr(text)
