"""Output comparison: exact lines, else numbers within 1e-3."""

from __future__ import annotations

from maxcode.evaluate import compare_output


def test_identical_and_whitespace_insensitive_at_line_ends() -> None:
    assert compare_output(b"1 2\n3\n", b"1 2\n3\n").matches
    assert compare_output(b"1 2\n3\n", b"1 2  \n3\n\n\n").matches
    assert compare_output(b"a\r\nb\r\n", b"a\nb").matches


def test_numbers_within_tolerance() -> None:
    assert compare_output(b"0.3333333\n", b"0.3335\n").matches
    assert not compare_output(b"0.333\n", b"0.335\n").matches
    assert compare_output(b"x 1.0000 y\n", b"x 1 y\n").matches
    assert not compare_output(b"nan\n", b"nan0\n").matches


def test_difference_names_the_line_and_both_values() -> None:
    result = compare_output(b"1\n2\n3\n", b"1\n5\n3\n")
    assert not result.matches
    assert result.detail == "line 2: expected '2', got '5'"


def test_missing_and_extra_lines() -> None:
    short = compare_output(b"1\n2\n3\n", b"1\n")
    assert "ended after 1 lines; expected 3" in short.detail
    extra = compare_output(b"1\n", b"1\n2\n")
    assert "1 extra lines" in extra.detail


def test_excerpts_are_bounded() -> None:
    result = compare_output(b"a" * 10_000 + b"\n", b"b" * 10_000 + b"\n")
    assert not result.matches
    assert len(result.detail) < 400
