"""Rounds forked from one zygote per side (``kernelbench/runner.py``): real sandboxed zygotes,
real torch, candidates that turn on their zygote.

Each property is asserted through correctness: a candidate written to be right only where the
property holds (it reads its own process's surroundings at import), against a reference that
assumes it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from maxcode.kinds.kernelbench import runner
from tests.evaluate.test_kernelbench_eval import CHEATS, judge, model_new
from tests.helpers import REPO, processes_of_this_test, processes_with, write_problem

pytest.importorskip("torch")

SCALED_GELU = REPO / "examples" / "kernelbench" / "1_ScaledGELU.py"
"""The problem the cheat fixtures are written against."""

_FORKED = """import os
with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
    FORKED = int(b"--zygote" in handle.read())
"""


def test_rounds_fork_their_workers_from_a_zygote(tmp_path: Path) -> None:
    """Right only where the candidate's worker is a zygote's fork: over two rounds it is, in
    both; one round (a search's screening) starts its workers afresh."""
    problem = write_problem(tmp_path, "return torch.relu(x) + 1")
    forked = model_new("return torch.relu(x) + FORKED", imports=_FORKED)
    assert judge(forked, problem, repeats=2, rounds=2).correct
    assert not judge(forked, problem, repeats=2, rounds=1).correct


def test_each_pair_of_zygotes_serves_at_most_its_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pair's draw (its layout, the pages its imports landed on) is shared by its forks: an
    evaluation of more rounds than ``ROUNDS_PER_PAIR`` starts a fresh pair for each that many,
    and closes each before the next starts."""
    from maxcode.kinds.kernelbench import evaluator

    started: list[runner.Zygotes] = []
    start = runner.Zygotes.start

    def counted(*args: Any, **kwargs: Any) -> runner.Zygotes:
        # Every earlier pair is over (its zygotes' runs ended) before the next starts.
        assert all(pair.reference.ended and pair.candidate.ended for pair in started)
        started.append(start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(evaluator, "ROUNDS_PER_PAIR", 2)
    monkeypatch.setattr(evaluator.Zygotes, "start", counted)
    problem = write_problem(tmp_path, "return torch.relu(x) + 1")
    forked = model_new("return torch.relu(x) + FORKED", imports=_FORKED)
    feedback = judge(forked, problem, repeats=2, rounds=3)
    assert feedback.correct and feedback.kernelbench.rounds == 3, feedback.error
    assert [pair.rounds for pair in started] == [2, 1]


def test_a_pairs_wall_limit_covers_the_rounds_it_serves_and_no_more() -> None:
    """A pair serves at most ``ROUNDS_PER_PAIR`` rounds however many the evaluation may run,
    so its zygotes may not live for the whole evaluation's cap."""
    from maxcode.kinds.kernelbench.parameters import KernelBenchSettings

    def rounds_covered(settings: KernelBenchSettings) -> float:
        per_round = 2 * 10.0 + settings.budget_s
        return (runner.pair_wall_s(10.0, settings) - runner._ANSWER_SLACK_S) / per_round

    assert rounds_covered(KernelBenchSettings(rounds=8, most_rounds=24)) == runner.ROUNDS_PER_PAIR
    assert rounds_covered(KernelBenchSettings(rounds=3)) == 4  # three and one held


_LEAVES_ONE_RUNNING = """import os, subprocess, sys
def _ours(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"maxcode-left-behind" in handle.read()
    except OSError:
        return False
LEFT = sum(_ours(pid) for pid in os.listdir("/proc") if pid.isdigit())
subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)", "maxcode-left-behind"],
    start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
"""


def test_nothing_a_round_leaves_running_reaches_the_next(tmp_path: Path) -> None:
    """A round's worker starts a process in a session of its own and exits without it; the
    next round's worker, forked from the same zygote, must find none left (the zygote is the
    orphans' subreaper and kills them before it answers): right only then. Nothing is left
    once the evaluation is over either."""
    problem = write_problem(tmp_path, "return torch.relu(x)")
    leaves = model_new("return torch.relu(x) + LEFT", imports=_LEAVES_ONE_RUNNING)
    assert judge(leaves, problem, repeats=2, rounds=3).correct
    assert processes_with("maxcode-left-behind") == []


@pytest.mark.parametrize("sent", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_candidate_that_turns_on_its_zygote_fails_its_round(
    tmp_path: Path, sent: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker can signal its zygote (same uid). Killed, the zygote's sandbox ends with the
    round in it; stopped, it cannot account for the round (its CPU time, what it left). Either
    way the round is a failure, however well the worker itself did, and nothing is left
    running. (The stopped zygote's silence is waited for up to the round's limit and the
    slack a zygote has to answer; a second of slack here, not ten: what is asserted is what
    follows the silence, and the suite has a budget.)"""
    monkeypatch.setattr(runner, "_ANSWER_SLACK_S", 1.0)
    problem = write_problem(tmp_path, "return torch.relu(x)")
    turns = model_new(
        "return torch.relu(x)",
        imports=f"import os\nos.kill(os.getppid(), {int(sent)})",
    )
    feedback = judge(turns, problem, repeats=2, rounds=2, timeout_s=6)
    assert not feedback.correct and feedback.error is not None, feedback.flags
    assert processes_of_this_test("--zygote") == []


def test_a_forked_round_that_never_returns_is_killed_at_its_limit(tmp_path: Path) -> None:
    """The zygote kills a round's worker at the round's time limit (and says so)."""
    problem = write_problem(tmp_path, "return torch.relu(x)")
    spins = model_new("while True:\n            pass")
    feedback = judge(spins, problem, repeats=2, rounds=2, timeout_s=6)
    assert not feedback.correct and feedback.error is not None
    assert feedback.error.kind == "timeout"
    assert processes_of_this_test("--zygote") == []


@pytest.mark.parametrize(
    ("fixture", "flag", "options"),
    [
        ("steal_turns.py", "parallel:", {"scale": 0.25, "repeats": None}),
        ("fork_helper.py", "untracked:", {"repeats": 24}),
    ],
)
def test_a_forked_rounds_clocks_are_its_workers(
    fixture: str, flag: str, options: dict[str, object]
) -> None:
    """The parent reads the CPU clocks of the round's worker, the zygote's child, not of the
    zygote (``cpuclock.find_worker``): work while the reference's calls run, and work handed
    to another process, are found in forked rounds as in fresh ones."""
    feedback = judge(CHEATS / fixture, SCALED_GELU, rounds=2, **options)
    assert feedback.correct, feedback.error
    assert feedback.suspect is not None and feedback.speedup == 0.0, feedback.flags
    assert any(found.startswith(flag) for found in feedback.flags), feedback.flags
