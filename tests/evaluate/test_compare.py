"""Output comparison: exact lines; integers exact at any size; real numbers within an absolute
or relative tolerance; everything else as text, whatever an adversarial output holds."""

from __future__ import annotations

import pytest

from maxcode.harness.compare import compare_output
from maxcode.tasks.model import FLOAT_ABS_TOL, FLOAT_REL_TOL


def test_identical_and_whitespace_insensitive_at_line_ends() -> None:
    assert compare_output(b"1 2\n3\n", b"1 2\n3\n").matches
    assert compare_output(b"1 2\n3\n", b"1 2  \n3\n\n\n").matches
    assert compare_output(b"a\r\nb\r\n", b"a\nb").matches
    assert compare_output(b"a\nb\n", b"a\rb").matches
    assert compare_output(b"1 2\n", b"  1\t2\n").matches
    assert compare_output(b"", b"\n \n").matches


def test_integers_match_only_exactly() -> None:
    # The two examples: a real number near an integer, and 19-digit integers.
    assert not compare_output(b"42\n", b"42.0009\n").matches
    assert not compare_output(b"1234567890123456789\n", b"1234567890123456788\n").matches
    assert compare_output(b"1234567890123456789\n", b"1234567890123456789\n").matches
    # Beyond Python's limit for int(str) (4300 digits): nothing is converted.
    huge = b"7" * 100_000
    assert compare_output(b"x " + huge + b"\n", b"x " + huge + b"\n").matches
    assert not compare_output(b"x " + huge + b"\n", b"x " + huge[:-1] + b"8\n").matches


@pytest.mark.parametrize(
    ("expected", "got"),
    [
        (b"3", b"3.0"),
        (b"3", b"3e0"),
        (b"5", b"+5"),
        (b"5", b"05"),
        (b"0", b"-0"),
        (b"0", b"+0"),
        (b"-0", b"0"),
        (b"007", b"7"),
        (b"10", b"1e1"),
    ],
)
def test_an_integer_is_not_matched_by_another_spelling(expected: bytes, got: bytes) -> None:
    assert not compare_output(expected, got).matches
    assert not compare_output(expected, got, abs_tol=1e6, rel_tol=0.9).matches


def test_integers_ignore_any_tolerance() -> None:
    assert not compare_output(b"42\n", b"43\n", abs_tol=10.0, rel_tol=0.5).matches
    assert compare_output(b"1.0 42\n", b"1.5 42\n", abs_tol=1.0).matches


def test_reals_within_the_absolute_tolerance() -> None:
    assert compare_output(b"0.0000005\n", b"0\n").matches
    assert compare_output(b"0.333333\n", b"0.3333333333\n").matches
    assert compare_output(b"x 1.0000 y\n", b"x 1 y\n").matches
    assert compare_output(b"-0.0\n", b"0.0\n").matches
    assert compare_output(b"1e-9\n", b"2e-9\n").matches
    assert not compare_output(b"0.001\n", b"0.0012\n").matches
    assert not compare_output(b"0.3333333\n", b"0.3335\n").matches
    assert not compare_output(b"2.5\n", b"2\n").matches


def test_reals_within_the_relative_tolerance() -> None:
    assert compare_output(b"1000000.0\n", b"1000000.5\n").matches
    assert not compare_output(b"1000000.0\n", b"1000002.0\n").matches
    assert compare_output(b"6.02e23\n", b"6.0200005E+23\n").matches
    assert not compare_output(b"6.02e23\n", b"6.03e23\n").matches
    # Relative to the expected value: a huge answer earns no larger allowance.
    assert not compare_output(b"1.0\n", b"1e30\n").matches
    assert not compare_output(b"1e308\n", b"-1e308\n").matches


def test_tolerances_can_be_set() -> None:
    assert compare_output(b"0.333\n", b"0.3335\n", abs_tol=1e-3).matches
    assert not compare_output(b"0.333\n", b"0.335\n", abs_tol=1e-3).matches
    assert compare_output(b"100.0\n", b"100.9\n", rel_tol=0.01).matches
    assert not compare_output(b"100.0\n", b"101.1\n", rel_tol=0.01).matches
    assert (FLOAT_ABS_TOL, FLOAT_REL_TOL) == (1e-6, 1e-6)


def test_zero_tolerances_mean_exact_decimal_values() -> None:
    exact = {"abs_tol": 0.0, "rel_tol": 0.0}
    assert compare_output(b"0.50\n", b"0.5\n", **exact).matches
    assert compare_output(b"1.5e3\n", b"1500\n", **exact).matches
    # Equal as doubles, not as decimals.
    assert not compare_output(b"0.1\n", b"0.10000000000000000001\n", **exact).matches
    assert not compare_output(b"0.0\n", b"1e-400\n", **exact).matches
    assert not compare_output(b"1.0\n", b"1e99999999999999999999999999999\n", **exact).matches


@pytest.mark.parametrize(
    ("expected", "got"),
    [
        (b"1e400", b"2e400"),  # both overflow a double: compared as text
        (b"1e400", b"inf"),
        (b"inf", b"1e400"),
        (b"1.5", b"1.5e" + b"9" * 10_000),
        (b"1.5", b"1" + b"0" * 5_000),
        (b"16", b"0x10"),
        (b"16.0", b"0x10"),
        (b"0x10", b"16"),
        (b"1000", b"1_000"),
        (b"1000.0", b"1_000.0"),
        (b"3", "\u0663".encode()),  # ARABIC-INDIC DIGIT THREE: str.isdigit() is true
        (b"3.0", "\u0663".encode()),
        (b"3.0", "\uff13.0".encode()),  # FULLWIDTH DIGIT THREE
        (b"nan", b"nan0"),
        (b"nan", b"NaN"),
        (b"nan", b"0"),
        (b"0.0", b"nan"),
        (b"inf", b"Infinity"),
        (b"1.0", b"inf"),
        (b"1.", b"1"),
        (b"1", b"1."),
        (b".5", b"0.5"),
        (b"0.5", b".5"),
        (b"1.0", "1.0\u00a0".encode()),  # no-break space is not a separator
        (b"1 2", b"1\x1c2"),  # nor is a file separator (str.split would say so)
        (b"1\n2", b"1\x1e2"),
        (b"\xff", b"\xfe"),  # invalid UTF-8 is compared as bytes, not as U+FFFD
        (b"1 2", b"1 2 3"),
        (b"1 2 3", b"1 2"),
    ],
)
def test_adversarial_tokens_never_match_a_different_answer(expected: bytes, got: bytes) -> None:
    result = compare_output(expected + b"\n", got + b"\n", abs_tol=1e-3, rel_tol=1e-3)
    assert not result.matches
    assert result.detail and len(result.detail) < 700


@pytest.mark.parametrize("token", [b"nan", b"inf", b"-inf", b"1e400", b"0x10", b"1_000"])
def test_special_tokens_match_themselves(token: bytes) -> None:
    assert compare_output(b"a " + token + b"\n", b"a " + token + b"\n").matches
    assert compare_output(b"a " + token + b" 1\n", b"a " + token + b"  1\n").matches


def test_huge_outputs_are_compared_without_blowing_up() -> None:
    one_long_line = b"1 " * 5_000_000
    result = compare_output(b"1\n", one_long_line)
    assert not result.matches and len(result.detail) < 400
    many_lines = b"1\n" + b"\n" * 5_000_000 + b"2\n3\n"
    result = compare_output(b"1\n", many_lines)
    assert result.detail == "5000002 extra lines after the expected 1 (first written: '2')"
    assert compare_output(b"1\n", b"1\n" + b" \n" * 5_000_000).matches
    long_token = b"9" * 3_000_000
    assert not compare_output(b"0.5\n", long_token + b"\n").matches
    assert not compare_output(b"0.5\n", b"0." + long_token + b"\n").matches


def test_difference_names_the_line_and_both_values() -> None:
    result = compare_output(b"1\n2\n3\n", b"1\n5\n3\n")
    assert not result.matches
    assert result.detail == "line 2: expected '2', got '5'"


def test_difference_says_why_a_number_did_not_match() -> None:
    near = compare_output(b"x 0.5\n", b"x 0.6\n")
    assert near.detail == (
        "line 1: expected 'x 0.5', got 'x 0.6' (token 2: off by 0.1, more than the tolerance 1e-06)"
    )
    integer = compare_output(b"3\n", b"3.0\n")
    assert integer.detail == (
        "line 1: expected '3', got '3.0'"
        " (token 1: an integer is expected, and integers match only exactly)"
    )


def test_missing_and_extra_lines() -> None:
    short = compare_output(b"1\n2\n3\n", b"1\n")
    assert "ended after 1 lines; expected 3" in short.detail
    blank_tail = compare_output(b"1\n2\n3\n", b"1\n\n\n")
    assert "ended after 1 lines; expected 3" in blank_tail.detail
    extra = compare_output(b"1\n", b"1\n2\n")
    assert "1 extra lines" in extra.detail
    inner_blank = compare_output(b"1\n\n2\n", b"1\n2\n")
    assert inner_blank.detail == "line 2: expected '', got '2'"


def test_excerpts_are_bounded() -> None:
    result = compare_output(b"a" * 10_000 + b"\n", b"b" * 10_000 + b"\n")
    assert not result.matches
    assert len(result.detail) < 400
    wide = compare_output("\u4e00".encode() * 10_000, b"b")
    assert len(wide.detail) < 400


@pytest.mark.parametrize(
    "tolerances",
    [{"abs_tol": -1e-9}, {"rel_tol": -0.1}, {"rel_tol": 1.0}, {"abs_tol": float("nan")}],
)
def test_tolerances_out_of_range_are_a_programming_error(tolerances: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="tolerances out of range"):
        compare_output(b"1\n", b"1\n", **tolerances)
