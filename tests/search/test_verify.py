"""The final re-verification: a run's best program is judged again before it is reported; when
it fails, the next best is tried, and the failure is said."""

from __future__ import annotations

import asyncio
from pathlib import Path

from maxcode.search.driver import _run_and_verify, summarize
from maxcode.search.results import evaluation_rewards
from tests.helpers import ECHO_SUM
from tests.search.scripted import ScriptedExecutor, scripted_search


def program(number: int, reward: float, again: float | None = None, marks: str = "") -> str:
    marks = f"#pragma candidate {number} reward {reward}\n" + marks
    if again is not None:
        marks += f"#pragma judged again {again}\n"
    return f"```cpp\n{marks}{ECHO_SUM}```"


def run(tmp_path: Path, replies: list[str], **settings: object) -> tuple[object, object, object]:
    store, search = scripted_search(
        tmp_path, replies, method="best-of-n", candidates=len(replies), **settings
    )
    outcome = asyncio.run(_run_and_verify(search))
    store.update_run("r1", status=outcome.status, message=outcome.message)
    return store, search, outcome


def test_the_best_program_is_judged_again_and_reported(tmp_path: Path) -> None:
    store, search, outcome = run(tmp_path, [program(1, 1.5), program(2, 3.0), program(3, 2.0)])
    assert isinstance(search.executor, ScriptedExecutor)  # type: ignore[attr-defined]
    # Three evaluations during the search, one more for the best program (node 1.1).
    assert [job.source.split("\n")[0] for job in search.executor.jobs][
        -1
    ] == "#pragma candidate 2 reward 3.0"  # type: ignore[attr-defined]
    assert len(search.executor.jobs) == 4  # type: ignore[attr-defined]
    # The search's evaluations screen; the re-verification's number is reported, timed so.
    assert [job.reported for job in search.executor.jobs] == [False] * 3 + [True]  # type: ignore[attr-defined]
    # Each screen may stop once its candidate is clearly below the best so far (the
    # reference's 1.0 when the step began); the reported number is timed in full.
    assert [job.bar for job in search.executor.jobs] == [1.0] * 3 + [None]  # type: ignore[attr-defined]
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    assert summary.best_speedup == 3.0 and summary.best_node == "1.1"
    assert summary.verified_node == "1.1" and summary.verified_speedup == 3.0
    assert summary.verification == [
        {
            "node": "1.1",
            "verified": True,
            "speedup": 3.0,
            "speedup_interval": None,
            "message": "",
            "suspect": None,
            "rounds": 0,
        }
    ]
    assert "candidate 2 reward 3.0" in (tmp_path / "best.cpp").read_text()
    assert summary.evaluations == 3  # re-verification is not a search evaluation
    assert outcome.message == ""  # type: ignore[attr-defined]


def test_when_the_best_fails_again_the_next_best_is_reported(tmp_path: Path) -> None:
    replies = [program(1, 1.5), program(2, 3.0, again=0), program(3, 2.0)]
    store, _, outcome = run(tmp_path, replies)
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    # The search saw 3.0x, and says so; the result is the program that held up.
    assert summary.best_speedup == 3.0 and summary.best_node == "1.1"
    assert summary.verified_node == "1.2" and summary.verified_speedup == 2.0
    assert [check["node"] for check in summary.verification] == ["1.1", "1.2"]
    assert summary.verification[0]["verified"] is False
    assert "wrong" in summary.verification[0]["message"]
    assert "candidate 3 reward 2.0" in (tmp_path / "best.cpp").read_text()
    message = outcome.message  # type: ignore[attr-defined]
    assert "node 1.1 (3.00x) failed re-verification" in message
    assert "node 1.2 is the result (2.00x again)" in message


def test_when_nothing_holds_up_the_reference_stands_and_a_replay_repeats_nothing(
    tmp_path: Path,
) -> None:
    replies = [program(n, 2.0 + n, again=0) for n in range(1, 5)]
    store, search, outcome = run(tmp_path, replies)
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    assert summary.verified_node is None and summary.verified_speedup == 1.0
    assert len(summary.verification) == 3  # at most three are tried
    assert (tmp_path / "best.cpp").read_text() == ECHO_SUM
    assert "the reference stands" in outcome.message  # type: ignore[attr-defined]
    jobs = len(search.executor.jobs)  # type: ignore[attr-defined]
    asyncio.run(_run_and_verify(search))  # type: ignore[arg-type]
    assert len(search.executor.jobs) == jobs  # type: ignore[attr-defined]


def test_verification_can_be_turned_off(tmp_path: Path) -> None:
    store, search, _ = run(tmp_path, [program(1, 2.0, again=0)], verify=False)
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    assert summary.verified_speedup is None and summary.verification == []
    assert len(search.executor.jobs) == 1  # type: ignore[attr-defined]


def test_a_suspect_result_is_never_the_best_nor_verified(tmp_path: Path) -> None:
    cheat = "#pragma void processes: a child kept running after the program exited\n"
    replies = [program(1, 1.5), program(2, 9.0, marks=cheat), program(3, 2.0)]
    store, search, _ = run(tmp_path, replies)
    cheat_node = search.nodes[2]  # type: ignore[attr-defined]
    assert cheat_node.status == "suspect" and cheat_node.reward == 0.0
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    assert summary.best_node == "1.2" and summary.best_speedup == 2.0
    # Only the honest best is judged again; the cheat's 9x is never tried.
    assert [check["node"] for check in summary.verification] == ["1.2"]
    assert summary.verified_node == "1.2"
    assert summary.void == [
        {
            "node": "1.1",
            "reason": "processes: a child kept running after the program exited",
            "claimed_speedup": 9.0,
            "isolation": "",
        }
    ]
    assert evaluation_rewards(store, "r1") == [1.5, 0.0, 2.0]  # type: ignore[arg-type]


def test_a_re_verification_that_comes_back_suspect_confirms_nothing(tmp_path: Path) -> None:
    replies = [program(1, 1.5), program(2, 3.0, marks="#pragma void when judged again\n")]
    store, _, outcome = run(tmp_path, replies)
    summary = summarize(store, "r1", tmp_path / "best.cpp")  # type: ignore[arg-type]
    assert [check["node"] for check in summary.verification] == ["1.1", "1.0"]
    first = summary.verification[0]
    assert first["verified"] is False and first["suspect"].startswith("processes:")
    assert "suspect, no reward" in first["message"]
    assert summary.verified_node == "1.0" and summary.verified_speedup == 1.5
    assert "node 1.1 (3.00x) failed re-verification" in outcome.message  # type: ignore[attr-defined]
