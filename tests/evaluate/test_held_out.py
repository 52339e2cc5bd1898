"""Held-out tests: used for the reward, never shown. A program fitted to the shown tests is
judged wrong, and its feedback says only that a hidden test failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxcode.errors import TaskError
from maxcode.kinds import evaluate_task
from maxcode.kinds.load import load_task
from maxcode.search.observation import describe_feedback
from tests.helpers import ECHO_SUM, write_task

PAIRS = [(3 * n + 1, 7 * n + 2) for n in range(10)]
TESTS = [(f"{a} {b}\n", f"{a + b}\n") for a, b in PAIRS]


def fitted_to(shown: list[tuple[int, int]]) -> str:
    """A program that knows the answers of the shown tests and prints 0 otherwise."""
    cases = "\n".join(
        f'    if (a == {a} && b == {b}) {{ puts("{a + b}"); return 0; }}' for a, b in shown
    )
    return (
        "#include <cstdio>\nint main() {\n    long long a, b;\n"
        '    if (scanf("%lld %lld", &a, &b) != 2) return 1;\n'
        f'{cases}\n    puts("0");\n}}\n'
    )


def test_ten_tests_hold_out_the_last_two_by_default(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "sum", tests=TESTS)))
    assert [test.index for test in task.tests if test.held_out] == [8, 9]
    few = load_task(str(write_task(tmp_path / "few", tests=TESTS[:5])))
    assert not any(test.held_out for test in few.tests)


def test_a_program_fitted_to_the_shown_tests_fails_a_hidden_one(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "sum", tests=TESTS)))
    feedback = evaluate_task(task, fitted_to(PAIRS[:8]), repeats=1)
    assert not feedback.correct and feedback.speedup == 0.0
    assert feedback.tests_passed == 8
    assert feedback.error is not None and feedback.error.message == "a hidden test failed"
    assert "held-out: a hidden test failed" in feedback.flags
    hidden = [outcome for outcome in feedback.tests if outcome.hidden]
    assert [outcome.index for outcome in hidden] == [8, 9]
    assert all(outcome.detail == "" for outcome in hidden)
    # Nothing of the hidden tests' expected outputs reaches the record or the prompt.
    printed = json.dumps(feedback.model_dump(mode="json"))
    text = describe_feedback(feedback)
    for a, b in PAIRS[8:]:
        # Expected outputs appear quoted in a wrong answer's detail ("expected '83', got '0'").
        assert f"'{a + b}'" not in printed and f"'{a + b}'" not in text
    assert "A hidden test failed." in text
    assert evaluate_task(task, ECHO_SUM, repeats=1).correct


def test_a_shown_failure_is_reported_in_full_before_a_hidden_one(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "sum", tests=TESTS)))
    feedback = evaluate_task(task, fitted_to(PAIRS[1:8]), repeats=1)
    assert feedback.error is not None
    assert (
        feedback.error.message.startswith("test 0: ") and "expected '3'" in feedback.error.message
    )
    assert "held-out: a hidden test failed" in feedback.flags


def test_task_toml_chooses_the_held_out_tests(tmp_path: Path) -> None:
    chosen = write_task(
        tmp_path / "chosen", tests=TESTS[:4], toml='kind = "cpp"\nheld_out = [0, 2]\n'
    )
    assert [t.index for t in load_task(str(chosen)).tests if t.held_out] == [0, 2]
    none = write_task(tmp_path / "none", tests=TESTS, toml='kind = "cpp"\nheld_out_share = 0\n')
    assert not any(t.held_out for t in load_task(str(none)).tests)
    wrong = write_task(tmp_path / "wrong", tests=TESTS[:4], toml='kind = "cpp"\nheld_out = [7]\n')
    with pytest.raises(TaskError, match="held_out names test 7"):
        load_task(str(wrong))
    every = write_task(
        tmp_path / "every", tests=TESTS[:2], toml='kind = "cpp"\nheld_out = [0, 1]\n'
    )
    with pytest.raises(TaskError, match="hides every test"):
        load_task(str(every))
