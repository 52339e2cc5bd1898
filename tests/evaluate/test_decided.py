"""Timing that stops when the decision is made: a screened candidate clearly below what the
search keeps stops at once; one above, or a reported number, is timed to its precision; and
``maxcode eval --precision`` sets that precision. Asserted through counts and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxcode.harness.measurement import Precision
from maxcode.harness.stats import SpeedupInterval
from maxcode.harness.turns import REPORTED, WALL_BUDGET_S
from maxcode.kinds import evaluate_task
from maxcode.kinds.cpp.evaluate_cpp import (
    WALL_MAX_ROUNDS,
    WALL_MIN_ROUNDS,
    WALL_PRECISION,
    wall_rule,
)
from maxcode.kinds.kernelbench.schedule import Stopping
from maxcode.kinds.load import load_task
from maxcode.search.config import SearchConfig
from maxcode.search.methods import make_method
from maxcode.search.tree import Node
from maxcode.types import Feedback
from tests.helpers import ECHO_SUM, run_maxcode, write_task

WIDE_BELOW = SpeedupInterval(0.5, 0.4, 0.6, 6)
WIDE_ABOVE = SpeedupInterval(3.0, 2.4, 3.6, 6)
STRADDLING = SpeedupInterval(1.0, 0.8, 1.2, 6)


def test_a_screen_stops_once_the_candidate_is_clearly_below_the_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAXCODE_TIMING_BUDGET_S", raising=False)
    screen = wall_rule(bar=1.0)
    assert screen.more(WIDE_BELOW, 6, 0.1) == 0
    # Above the bar, or straddling it: timed on to the precision, as without a bar.
    for interval in (WIDE_ABOVE, STRADDLING):
        assert screen.more(interval, 6, 0.1) == 6
        assert wall_rule().more(interval, 6, 0.1) == 6
    assert wall_rule().more(WIDE_BELOW, 6, 0.1) == 6


def test_a_precision_sets_the_interval_and_scales_the_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAXCODE_TIMING_BUDGET_S", raising=False)
    assert wall_rule(reported=True).target == WALL_PRECISION / 2 == wall_rule(precision=0.01).target
    assert wall_rule(precision=0.01).most == WALL_MAX_ROUNDS * REPORTED
    assert wall_rule().most == WALL_MAX_ROUNDS
    within_two = SpeedupInterval(1.0, 0.985, 1.015, 40)
    assert wall_rule(precision=0.02).more(within_two, 40, 0.1) == 0
    assert wall_rule(precision=0.01).more(within_two, 40, 0.1) == 40
    wide = SpeedupInterval(1.0, 0.9, 1.1, 6)
    # A looser precision has smaller caps: a quarter of the rounds and seconds at +-4%.
    assert wall_rule(precision=0.04).more(wide, WALL_MAX_ROUNDS // 4, 0.1) == 0
    assert wall_rule(precision=0.04).more(wide, 6, WALL_BUDGET_S / 4) == 0
    assert wall_rule().more(wide, 6, WALL_BUDGET_S / 4) > 0


def test_a_kernelbench_screen_stops_its_calls_below_the_bar() -> None:
    slower = [[2.0] * 8, [2.2] * 8, [1.9] * 8, [2.1] * 8]  # the candidate's chunks
    reference = [[1.0] * 8, [1.1] * 8, [0.9] * 8, [1.05] * 8]
    loose = dict(min_calls=10, max_calls=1000, budget_s=60.0, min_pairs=4, target=0.001)
    assert Stopping(**loose).next_calls(8, reference, slower, 0.1) == 8  # not yet narrow
    assert Stopping(**loose, bar=1.0).next_calls(8, reference, slower, 0.1) == 0
    assert Stopping(**loose, bar=0.2).next_calls(8, reference, slower, 0.1) == 8


def _evaluated(node_id: str, parent: Node, reward: float) -> Node:
    feedback = Feedback(
        task="t",
        compiled=True,
        correct=True,
        speedup=reward,
        metric="wall",
        reference_cost=1.0,
        candidate_cost=1.0 / reward,
        tests_passed=1,
        tests_total=1,
    )
    return Node(node_id, parent, 1, "int main() {}", feedback=feedback)


def test_methods_that_keep_the_best_set_the_bar_at_the_best_so_far() -> None:
    root = Node("0", None, 0, "reference")
    nodes = [root, _evaluated("1.0", root, 2.5), _evaluated("1.1", root, 1.5)]
    for method in ("best-of-n", "effi-learner", "cuda-llm"):
        chosen = make_method(SearchConfig(method=method))
        assert chosen.bar([root]) == 1.0  # the reference's reward
        assert chosen.bar(nodes) == 2.5, method
    for method in ("beam", "tree"):  # they rank candidates below the best: no bar
        assert make_method(SearchConfig(method=method)).bar(nodes) is None


UNREACHABLE = 1000.0
"""A bar no program equal to the reference comes near: its interval lies below it whatever the
noise, so the screen's stop is asserted as a count, not through a measured speed."""


def test_a_candidate_clearly_below_the_bar_is_decided_in_the_first_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bars: list[float | None] = []
    real = Precision.more

    def noting(rule: Precision, interval: SpeedupInterval, rounds: int, elapsed_s: float) -> int:
        bars.append(rule.bar)
        return real(rule, interval, rounds, elapsed_s)

    monkeypatch.setattr(Precision, "more", noting)
    task = load_task(str(write_task(tmp_path / "sum")))
    screened = evaluate_task(task, ECHO_SUM, bar=UNREACHABLE)
    assert bars == [UNREACHABLE]  # asked once, after the first batch, and stopped there
    assert screened.correct and screened.repeats == WALL_MIN_ROUNDS
    assert screened.reward < UNREACHABLE


def test_eval_takes_a_precision_for_cpp_and_kernelbench_and_refuses_it_elsewhere(
    tmp_path: Path,
) -> None:
    folder = write_task(tmp_path / "sum")
    candidate = tmp_path / "same.cpp"
    candidate.write_text(ECHO_SUM)
    done = run_maxcode("eval", str(folder), str(candidate), "--precision", "0.2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["correct"] and result["repeats"] >= WALL_MIN_ROUNDS
    project = Path(__file__).resolve().parents[2] / "examples" / "project"
    folders = [path for path in project.iterdir() if (path / "task.toml").is_file()]
    refused = run_maxcode("eval", str(folders[0]), str(folders[0]), "--precision", "0.01")
    assert refused.returncode == 2
    assert "--precision is for C++ and KernelBench tasks" in refused.stderr
    assert "Traceback" not in refused.stderr
