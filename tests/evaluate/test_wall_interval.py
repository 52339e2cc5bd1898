"""The C++ wall metric's adaptive rounds and interval: asserted through counts and the shape of
the interval (its ends around the estimate, caps respected), never through a timing threshold."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from maxcode.harness.measurement import Precision
from maxcode.harness.stats import SpeedupInterval
from maxcode.harness.turns import REPORTED, WALL_BUDGET_S
from maxcode.kinds.cpp import evaluate_cpp as cpp
from maxcode.kinds.cpp.evaluate_cpp import (
    WALL_MAX_ROUNDS,
    WALL_MIN_BATCH,
    WALL_MIN_ROUNDS,
    evaluate_cpp,
    wall_rule,
)
from maxcode.kinds.load import load_task
from tests.helpers import ECHO_SUM, write_task


def test_a_narrow_interval_stops_the_rounds() -> None:
    assert wall_rule().more(SpeedupInterval(1.0, 0.99, 1.01, 6), 6, 0.1) == 0


def test_a_wide_interval_asks_for_more_rounds_within_the_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAXCODE_TIMING_BUDGET_S")  # the default budget
    wide = SpeedupInterval(1.0, 0.9, 1.1, 6)  # +-10%: about 25 times the rounds wanted
    assert wall_rule().more(wide, 6, 0.1) == 6  # at most as many again as so far
    slight = SpeedupInterval(1.0, 0.9799, 1.0201, 40)
    assert wall_rule().more(slight, 40, 0.1) == WALL_MIN_BATCH
    assert wall_rule().more(wide, WALL_MAX_ROUNDS, 0.1) == 0
    assert wall_rule().more(wide, 6, WALL_BUDGET_S) == 0  # the time budget is spent
    assert wall_rule().more(wide, 20, WALL_BUDGET_S * 0.9) == 2  # what still fits
    monkeypatch.setenv("MAXCODE_TIMING_BUDGET_S", str(WALL_BUDGET_S / 10))
    assert wall_rule().more(wide, 6, WALL_BUDGET_S / 10) == 0  # a smaller budget holds


def test_a_reported_speedup_times_to_half_the_interval_within_four_times_the_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAXCODE_TIMING_BUDGET_S")  # the default budget
    screened = SpeedupInterval(1.0, 0.985, 1.015, 40)  # +-1.5%: narrow for a screen
    assert wall_rule().more(screened, 40, 0.1) == 0
    assert wall_rule(reported=True).more(screened, 40, 0.1) == 40  # as many again
    assert wall_rule(reported=True).more(SpeedupInterval(1.0, 0.991, 1.009, 40), 40, 0.1) == 0
    wide = SpeedupInterval(1.0, 0.9, 1.1, 6)
    assert wall_rule().more(wide, WALL_MAX_ROUNDS, 0.1) == 0
    assert wall_rule(reported=True).more(wide, WALL_MAX_ROUNDS, 0.1) == WALL_MAX_ROUNDS
    assert wall_rule(reported=True).more(wide, 6 * REPORTED, WALL_BUDGET_S) > 0
    assert wall_rule(reported=True).more(wide, 6, WALL_BUDGET_S * REPORTED) == 0
    monkeypatch.setenv("MAXCODE_TIMING_BUDGET_S", str(WALL_BUDGET_S / 10))  # a cap set holds
    assert wall_rule(reported=True).more(wide, 6, WALL_BUDGET_S / 10) == 0


def test_maxcode_eval_times_its_number_as_reported_and_a_screen_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``maxcode eval`` reports its number (a C++ task here; KernelBench gets the same flag
    with its rounds); a caller of ``evaluate_task`` (a search's screen) does not by default."""
    import maxcode.api
    import maxcode.kinds

    seen: list[bool] = []
    real = cpp.wall_rule

    def noting(
        reported: bool = False, precision: float | None = None, bar: float | None = None
    ) -> Precision:
        seen.append(reported)
        return real(reported, precision, bar)

    monkeypatch.setattr(cpp, "wall_rule", noting)
    folder = write_task(tmp_path / "t")
    candidate = tmp_path / "candidate.cpp"
    candidate.write_text(ECHO_SUM)
    assert maxcode.api.evaluate(str(folder), candidate).correct
    assert seen and all(seen)
    seen.clear()
    assert maxcode.kinds.evaluate_task(load_task(str(folder)), ECHO_SUM).correct
    assert seen and not any(seen)


def test_an_evaluation_reports_its_rounds_and_an_interval_around_the_speedup(
    tmp_path: Path,
) -> None:
    task = load_task(str(write_task(tmp_path / "t")))
    feedback = evaluate_cpp(task, ECHO_SUM, repeats=1)
    assert feedback.correct and feedback.speedup_interval is not None
    low, high = feedback.speedup_interval
    assert 0 < low <= feedback.speedup <= high
    assert WALL_MIN_ROUNDS <= feedback.repeats <= WALL_MAX_ROUNDS


NOISY_SUM = """#include <cstdio>
#include <random>
#include <unistd.h>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    usleep(std::random_device{}() % 2 ? 0 : 400);  // a ratio that stays wide
    printf("%lld\\n", a + b);
}
"""


def test_the_budget_counts_what_the_timing_costs_not_only_the_programs_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiny programs cost more in sandbox starts and launches than they run: the budget is
    spent on the rounds' elapsed time, so batches whose start takes 0.2 s more (here: a sleep
    around the real runner) stop after the third within 0.5 s. Counting the programs' own
    milliseconds, the same evaluation ran six batches (109 rounds), and tasks of a few tests
    every one of ``WALL_MAX_ROUNDS`` rounds."""
    monkeypatch.setenv("MAXCODE_TIMING_BUDGET_S", "0.5")
    batches: list[int] = []
    real = cpp._Runner.run

    def slow_start(self: cpp._Runner, plan: list, programs: cpp._Programs) -> list:
        batches.append(len(plan))
        time.sleep(0.2)
        return real(self, plan, programs)

    monkeypatch.setattr(cpp._Runner, "run", slow_start)
    task = load_task(str(write_task(tmp_path / "t")))
    feedback = evaluate_cpp(task, NOISY_SUM, repeats=1)
    assert feedback.correct
    timed = batches[2:]  # the first are the correctness runs: the reference's, the candidate's
    assert 1 <= len(timed) <= 3  # two of 0.2 s fit in 0.5 s, and the batch that crossed it
    assert WALL_MIN_ROUNDS <= feedback.repeats < WALL_MAX_ROUNDS
    assert sum(timed) == 2 * len(task.tests) * feedback.repeats


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_counted_instructions_have_an_exact_interval(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "t")))
    feedback = evaluate_cpp(task, ECHO_SUM, metric="instructions")
    assert feedback.correct and feedback.speedup == 1.0
    assert feedback.speedup_interval == (1.0, 1.0)
