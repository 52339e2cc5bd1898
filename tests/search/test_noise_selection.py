"""Selection that a lucky draw cannot fool: the search ranks timed results by the low end of
their 95% interval, re-verification confirms only a fresh interval wholly above 1x, and the
reported result carries its interval. Scripted measurements: no timing, no noise."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from maxcode.report import run_report
from maxcode.search.driver import _run_and_verify, summarize
from maxcode.search.results import confirms, run_result
from maxcode.search.tree import Node
from maxcode.store import RunStore
from tests.helpers import ECHO_SUM
from tests.search.scripted import feedback_of, scripted_search


def program(number: int, speedup: float, low: float, high: float, again: str = "") -> str:
    marks = f"#pragma candidate {number} reward {speedup}\n#pragma interval {low} {high}\n"
    return f"```cpp\n{marks}{again}{ECHO_SUM}```"


def run(tmp_path: Path, replies: list[str]) -> tuple[RunStore, object, object]:
    store, search = scripted_search(tmp_path, replies, method="best-of-n", candidates=len(replies))
    outcome = asyncio.run(_run_and_verify(search))
    store.update_run("r1", status=outcome.status, message=outcome.message)
    return store, search, outcome


def test_the_reward_is_the_low_end_of_the_interval_and_old_verdicts_keep_their_speedup() -> None:
    timed = feedback_of(1.06, interval=(0.98, 1.14))
    assert timed.reward == 0.98 and not confirms(timed)
    assert feedback_of(1.06, interval=(1.02, 1.10)).reward == 1.02
    exact = feedback_of(1.06)  # no interval: instructions, or a run stored before intervals
    assert exact.reward == 1.06 and confirms(exact)
    node = Node("1.0", Node("0", None, 0, ""), 1, "x", feedback=timed)
    assert node.reward == 0.98 and node.speedup == 1.06


def test_a_lucky_draw_of_an_equal_program_does_not_become_the_best(tmp_path: Path) -> None:
    # Three draws of programs equal to the reference, the luckiest measured 1.09x.
    replies = [
        program(1, 1.03, 0.97, 1.09),
        program(2, 1.09, 0.99, 1.19),
        program(3, 0.98, 0.95, 1.01),
    ]
    store, search, _ = run(tmp_path, replies)
    summary = summarize(store, "r1", tmp_path / "best.cpp")
    assert summary.best_node is None and summary.best_speedup == 1.0
    assert summary.verification == [] and summary.verified_speedup == 1.0
    assert (tmp_path / "best.cpp").read_text() == ECHO_SUM  # the reference stands
    assert len(search.executor.jobs) == 3  # type: ignore[attr-defined]


def test_a_sure_gain_beats_a_larger_but_noisier_draw(tmp_path: Path) -> None:
    replies = [program(1, 1.12, 0.99, 1.26), program(2, 1.05, 1.03, 1.07)]
    store, _, _ = run(tmp_path, replies)
    summary = summarize(store, "r1", tmp_path / "best.cpp")
    assert summary.best_node == "1.1" and summary.best_speedup == 1.03
    assert summary.verified_node == "1.1" and summary.verified_speedup == 1.05
    assert summary.verified_interval == [1.03, 1.07]
    # The store's reward column holds what the search maximized, not the point estimate.
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        stored = connection.execute(
            "SELECT reward FROM evaluations WHERE run_id = 'r1' ORDER BY created_at, rowid"
        ).fetchall()
    assert [row[0] for row in stored] == [0.99, 1.03]


def test_a_lucky_first_draw_that_the_fresh_one_does_not_confirm(tmp_path: Path) -> None:
    again = "#pragma judged again 1.01\n#pragma interval again 0.97 1.05\n"
    store, _, outcome = run(tmp_path, [program(1, 1.10, 1.02, 1.18, again)])
    summary = summarize(store, "r1", tmp_path / "best.cpp")
    assert summary.best_node == "1.0" and summary.best_speedup == 1.02
    assert summary.verified_node is None and summary.verified_speedup == 1.0
    (check,) = summary.verification
    assert check["verified"] is False and check["speedup_interval"] == [0.97, 1.05]
    assert "not surely faster than the reference" in check["message"]
    assert "the reference stands" in outcome.message  # type: ignore[attr-defined]


def test_the_reported_result_and_the_report_carry_the_interval(tmp_path: Path) -> None:
    store, _, _ = run(tmp_path, [program(1, 1.50, 1.40, 1.61)])
    record = store.get_run("r1")
    assert record is not None
    result = run_result(store, record)
    assert result.verified and result.speedup == 1.5 and result.interval == (1.4, 1.61)
    assert result.text() == "1.50x (95% CI 1.40-1.61)"
    html = run_report(store, "r1")
    assert "1.50x (95% CI 1.40-1.61)" in html
