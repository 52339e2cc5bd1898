"""Rounds of a KernelBench evaluation: timing windows with fresh worker pairs, combined into one
speedup; the first verdict that is not a clean correct one is the evaluation's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from maxcode.harness.integrity import consequence_of
from maxcode.harness.stats import Z975
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench import rounds
from maxcode.kinds.kernelbench.rounds import (
    LEAST_ROUNDS,
    MOST_ROUNDS,
    REPORTED_ROUNDS,
    Tally,
    combine,
    set_aside,
    wide,
)
from maxcode.kinds.load import load_task
from maxcode.types import Feedback, KernelBenchDetails, TimingStats
from tests.helpers import REPO, run_maxcode

CHEATS = REPO / "tests" / "fixtures" / "kernelbench" / "cheats"
PROBLEM = CHEATS / "problem.py"


def measured(
    speedup: float,
    interval: tuple[float, float] | None,
    *,
    correct: bool = True,
    suspect: str | None = None,
    flags: tuple[str, ...] = (),
) -> Feedback:
    return Feedback(
        task="t",
        compiled=True,
        correct=correct,
        speedup=speedup if correct and suspect is None else 0.0,
        metric="wall",
        reference_cost=2e-3,
        candidate_cost=2e-3 / speedup,
        tests_passed=3 if correct else 1,
        tests_total=3,
        speedup_interval=interval,
        suspect=suspect,
        kernelbench=KernelBenchDetails(),
        flags=list(flags),
        repeats=50,
        phases={"startup": 1.5, "timing": 1.0},
        speedup_vs_compile=None,
    )


def test_rounds_combine_as_independent_errors_of_a_geometric_mean() -> None:
    rounds = [
        measured(1.01, (1.01 / 1.04, 1.01 * 1.05)),
        measured(0.99, (0.99 / 1.04, 0.99 * 1.05)),
    ]
    combined = combine(rounds)
    assert combined.kernelbench.rounds == 2 and combined.correct
    assert combined.speedup == pytest.approx(math.sqrt(1.01 * 0.99))
    assert combined.candidate_cost == pytest.approx(combined.reference_cost / combined.speedup)
    assert combined.repeats == 100
    assert combined.phases == {"startup": 3.0, "timing": 2.0}
    low, high = combined.speedup_interval or (0, 0)
    # Equal widths, equal weights; the rounds agree within their intervals: each round's
    # distance to its ends, root sum of squares over two rounds (a square root of 2 narrower).
    assert math.log(combined.speedup / low) == pytest.approx(math.log(1.04) / math.sqrt(2))
    assert math.log(high / combined.speedup) == pytest.approx(math.log(1.05) / math.sqrt(2))


def test_a_round_with_a_wide_interval_moves_the_result_little() -> None:
    # A burst of load, or time outside the calls charged to the low end, in one round only.
    combined = combine([measured(1.0, (0.97, 1.03)), measured(0.55, (1e-6, 0.9))])
    # Weights: the inverse square of each round's width as a standard deviation of the log.
    narrow = math.log(1.03 / 0.97) / (2 * Z975)
    wide = math.log(0.9 / 1e-6) / (2 * Z975)
    share = narrow**-2 / (narrow**-2 + wide**-2)
    assert combined.speedup == pytest.approx(math.exp((1 - share) * math.log(0.55)))
    assert share > 0.999  # the narrow round is nearly all of it


def test_rounds_that_disagree_more_than_their_intervals_admit_widen_the_interval() -> None:
    # Two processes 10% apart with intervals of +-1%: the spread of the rounds wins.
    combined = combine([measured(1.10, (1.09, 1.11)), measured(1.00, (0.99, 1.01))])
    low, high = combined.speedup_interval or (0, 0)
    assert low < 1.0 < 1.10 < high
    # Without intervals (too few pairs), the spread alone with Student's t.
    alone = combine([measured(1.10, None), measured(1.00, None), measured(1.05, None)])
    low, high = alone.speedup_interval or (0, 0)
    assert low < 1.0 < 1.10 < high


@pytest.mark.parametrize(
    "last",
    [
        measured(1.0, None, correct=False),
        measured(1.5, (1.4, 1.6), suspect="timing: most of the work was hidden"),
    ],
)
def test_the_first_round_that_is_not_clean_is_the_verdict(last: Feedback) -> None:
    combined = combine([measured(1.3, (1.2, 1.4)), last])
    assert combined.speedup == 0.0 and combined.kernelbench.rounds == 2
    assert [done.speedup for done in combined.kernelbench.per_round] == [1.3, 0.0]
    # Wherever it stands: the first round that is not clean is the verdict.
    assert combine([last, measured(1.3, (1.2, 1.4))]).suspect == last.suspect
    assert (combined.correct, combined.suspect) == (last.correct, last.suspect)
    assert combined.phases == {"startup": 3.0, "timing": 2.0}


HIDDEN = "hidden: work outside the timed calls: surely 23.8 ms per call more"


def tallied(
    wanted: int, *results: Feedback, most: int | None = None, precision: float | None = None
) -> tuple[Feedback, int]:
    """What a tally of ``wanted`` rounds (up to ``most`` while their interval is wider than
    ``precision``) makes of these rounds in turn, and how many it ran."""
    tally, ran = Tally(wanted, most, precision), 0
    for result in results:
        if not tally.more():
            break
        tally.add(result)
        ran += 1
    assert not tally.more()
    return tally.result(), ran


def void(flag: str, *more: str) -> Feedback:
    return measured(1.5, (1.4, 1.6), suspect=flag, flags=(flag, *more))


def test_a_void_from_one_pair_of_processes_needs_a_second_round_to_stand() -> None:
    """An identical candidate was void once by its outside time, a state of one worker
    (``rounds.CONFIRMED``): another round of fresh workers runs, and decides."""
    # Not repeated: set aside, said, its seconds counted; the evaluation goes on.
    passed, ran = tallied(2, void(HIDDEN), measured(1.0, (0.98, 1.02)), measured(1.02, None))
    assert ran == 3 and passed.correct and passed.suspect is None and passed.kernelbench.rounds == 2
    assert passed.speedup == pytest.approx(math.sqrt(1.02))
    assert any(f.startswith("rounds: round 1 was void") and "23.8 ms" in f for f in passed.flags)
    assert passed.phases == {"startup": 4.5, "timing": 3.0}
    assert consequence_of(passed.flags[-1]) == "warn"
    # Repeated, or anything not clean next: the first void is the verdict.
    for second in (void(HIDDEN), measured(1.0, None, correct=False)):
        held, ran = tallied(4, void(HIDDEN), second, measured(1.0, (0.98, 1.02)))
        assert ran == 2 and held.suspect == HIDDEN and held.speedup == 0.0
        assert [done.speedup for done in held.kernelbench.per_round] == [0.0, 0.0]
    # Once per evaluation: a second such void is a verdict as it comes.
    again, ran = tallied(3, void(HIDDEN), measured(1.0, (0.98, 1.02)), void(HIDDEN))
    assert ran == 3 and again.suspect == HIDDEN
    # A void that no noise makes (or with such a finding beside) needs no second round.
    for flags in [("timing: in-process timings disagree",), (HIDDEN, "threads: one started")]:
        final, ran = tallied(4, void(*flags), measured(1.0, (0.98, 1.02)))
        assert ran == 1 and final.suspect == flags[0]


def test_a_round_set_aside_takes_no_first_round_measurement_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first round measures what later ones skip (the ``torch.compile`` baseline, the
    profiles); a void round held and then set aside must not take them away with it (the
    contract test once lost ``timings.compile`` that way)."""
    from maxcode.kinds.kernelbench import evaluator
    from maxcode.kinds.kernelbench.parameters import KernelBenchSettings

    results = iter([void(HIDDEN), measured(1.0, (0.98, 1.02)), measured(1.0, (0.98, 1.02))])
    asked: list[bool] = []

    def one_round(
        task: object, candidate: str, settings: KernelBenchSettings, *rest: object
    ) -> Feedback:
        asked.append(settings.compile_baseline)
        return next(results)

    monkeypatch.setattr(evaluator, "_one_round", one_round)
    settings = KernelBenchSettings(rounds=2, compile_baseline=True)
    task = load_task(str(PROBLEM))
    combined = evaluator.evaluate_kernelbench(task, "", settings=settings)
    assert asked == [True, True, False]
    assert combined.kernelbench.rounds == 2 and combined.suspect is None


def test_a_round_far_outside_the_others_is_set_aside_and_named() -> None:
    # One round wrong with a narrow interval: weighted by its width it would pull the result
    # to about 0.6 (an identical level1/45 once combined to 0.602 this way).
    usual = [measured(s, (s / 1.04, s * 1.04)) for s in (1.01, 0.99, 1.0)]
    odd = measured(0.5, (0.49, 0.51))
    combined = combine([usual[0], odd, *usual[1:]])
    alone = combine(usual)
    assert combined.speedup == pytest.approx(alone.speedup)
    assert combined.speedup_interval == pytest.approx(alone.speedup_interval)
    assert combined.kernelbench.rounds == 4 and combined.repeats == 200 and combined.suspect is None
    # Each round's own result stays, in order, the one set aside included.
    assert [done.speedup for done in combined.kernelbench.per_round] == [1.01, 0.5, 0.99, 1.0]
    assert combined.kernelbench.per_round[1].interval == (0.49, 0.51)
    assert combined.flags == [
        "rounds: round 2's speedup 0.500 was set aside, far outside the other rounds "
        "(their median 0.995)"
    ]
    assert consequence_of(combined.flags[0]) == "warn"


def test_rounds_within_their_noise_and_too_few_rounds_set_nothing_aside() -> None:
    spread = [measured(s, (s / 1.04, s * 1.04)) for s in (1.03, 0.97, 1.0, 1.01)]
    assert set_aside(spread) == [] and combine(spread).flags == []
    # A round made wide (time outside the calls charged to its low end) is weighted down,
    # not set aside: its own interval admits the distance.
    wide = measured(0.55, (1e-6, 0.9))
    assert set_aside([*spread[:2], wide]) == []
    # Two rounds cannot tell which one is odd; rounds without intervals neither.
    assert set_aside([spread[0], measured(0.5, (0.49, 0.51))]) == []
    assert set_aside([measured(s, None) for s in (1.0, 1.0, 0.5)]) == []


def test_each_round_keeps_both_sides_median_call() -> None:
    """A lean of the rounds is read by the side that moved: each round's medians stay."""
    rounds = [measured(1.0, (0.98, 1.02)), measured(1.25, (1.2, 1.3))]
    for done, (reference, candidate) in zip(rounds, [(2e-3, 2e-3), (2.5e-3, 2e-3)]):
        done.kernelbench.timings["reference"] = TimingStats(
            median_s=reference, spread_s=0.0, trials=50
        )
        done.kernelbench.timings["candidate"] = TimingStats(
            median_s=candidate, spread_s=0.0, trials=50
        )
    combined = combine(rounds)
    assert [(done.reference_s, done.candidate_s) for done in combined.kernelbench.per_round] == [
        (2e-3, 2e-3),
        (2.5e-3, 2e-3),
    ]
    untimed = combine([measured(1.0, None), measured(1.0, None)])
    assert [done.reference_s for done in untimed.kernelbench.per_round] == [None, None]


def test_each_rounds_findings_are_kept_with_its_number() -> None:
    combined = combine(
        [measured(1.0, (0.98, 1.02)), measured(1.0, (0.98, 1.02), flags=("outside: 1 ms",))]
    )
    assert combined.flags == ["outside: 1 ms (round 2)"]


def test_an_evaluation_in_rounds_starts_fresh_workers_for_each() -> None:
    task = load_task(str(PROBLEM))
    honest = (CHEATS / "honest.py").read_text()
    feedback = evaluate_task(task, honest, repeats=20, rounds=2)
    assert feedback.correct and feedback.kernelbench.rounds == 2, feedback.error
    assert feedback.repeats == 40  # 20 timed calls a side in each round
    assert feedback.speedup_interval is not None
    assert feedback.tests_passed == feedback.tests_total == 3
    assert (
        len(feedback.kernelbench.per_round) == 2
    )  # each round's own result (its content: combine's tests)


def test_a_wrong_candidate_stops_after_its_first_round() -> None:
    task = load_task(str(PROBLEM))
    feedback = evaluate_task(task, (CHEATS / "zeros.py").read_text(), repeats=20, rounds=3)
    assert not feedback.correct and feedback.kernelbench.rounds == 1


def rounds_at(*speedups: float) -> list[Feedback]:
    return [measured(speedup, (speedup * 0.9, speedup * 1.1)) for speedup in speedups]


def test_rounds_go_on_until_their_interval_is_as_narrow_as_the_precision_or_the_cap() -> None:
    """Past the rounds wanted, clean rounds go on while the interval they combine to (as
    reported) reaches further than the precision from its estimate."""
    # Rounds of (0.9, 1.1) that agree: about -10.5% / sqrt(n) below, so within 5% after five
    # rounds, 3% after 13.
    agreeing = rounds_at(*[1.0] * 16)
    combined, ran = tallied(3, *agreeing, most=16, precision=0.05)
    assert ran == 5 and combined.kernelbench.rounds == 5
    low, high = combined.speedup_interval
    assert high - 1 <= 0.05 and 1 - low <= 0.05
    assert tallied(3, *agreeing, most=16, precision=0.03)[1] == 13
    # Rounds that disagree more than their intervals admit widen the interval (Birge): more.
    scattering = rounds_at(*[1.0, 1.12, 0.89] * 6)
    assert tallied(3, *scattering, most=18, precision=0.05)[1] == 16
    # The cap stops them first, the interval left wider; without a cap, exactly those wanted.
    combined, ran = tallied(3, *scattering, most=6, precision=0.01)
    assert ran == 6 and len(combined.kernelbench.per_round) == 6
    assert tallied(3, *scattering, precision=0.01)[1] == 3


def test_a_round_that_is_not_clean_ends_the_added_rounds() -> None:
    wrong = measured(1.0, None, correct=False)
    combined, ran = tallied(2, *rounds_at(1.0, 1.1), wrong, *rounds_at(1.0), most=6)
    assert ran == 3 and not combined.correct and combined.speedup == 0.0


def test_a_round_set_aside_does_not_widen_the_interval() -> None:
    kept = [measured(speedup, (speedup * 0.99, speedup * 1.01)) for speedup in (1.0, 1.001, 0.999)]
    odd = measured(2.0, (1.99, 2.01))
    assert set_aside([*kept, odd]) == [3]
    assert not wide(kept, 0.01) and not wide([*kept, odd], 0.01)
    # A round that differs less is kept, and widens the interval.
    differing = measured(1.05, (1.02, 1.08))
    assert set_aside([*kept, differing]) == [] and wide([*kept, differing], 0.01)


def test_a_reported_evaluation_adds_rounds_only_when_timed_adaptively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``maxcode eval`` and re-verification: without ``--repeats`` or ``--rounds``, rounds go
    on past ``LEAST_ROUNDS`` while their interval is wider than the precision (here any is),
    up to ``MAXCODE_MOST_ROUNDS``; with a fixed number of calls, or of rounds, exactly that
    many (``REPORTED_ROUNDS``)."""
    monkeypatch.setattr(rounds, "LEAST_ROUNDS", 2)
    monkeypatch.setattr(rounds, "REPORTED_ROUNDS", 2)
    monkeypatch.setenv("MAXCODE_MOST_ROUNDS", "3")
    monkeypatch.setattr(rounds, "REPORTED_PRECISION", 1e-9)
    task = load_task(str(PROBLEM))
    honest = (CHEATS / "honest.py").read_text()
    adaptive = evaluate_task(task, honest, reported=True)
    assert adaptive.correct and adaptive.suspect is None, (adaptive.error, adaptive.flags)
    assert adaptive.kernelbench.rounds == 3 and len(adaptive.kernelbench.per_round) == 3
    fixed = evaluate_task(task, honest, repeats=20, reported=True)
    assert fixed.correct and fixed.kernelbench.rounds == 2, fixed.error
    assert evaluate_task(task, honest, rounds=1, reported=True).kernelbench.rounds == 1


def test_the_most_rounds_setting_caps_a_reported_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``MAXCODE_MOST_ROUNDS`` bounds what a reported evaluation costs: unset, the defaults;
    below ``REPORTED_ROUNDS``, the count itself, timed adaptively or not (what ``evaluate_task``
    runs: the test above)."""
    monkeypatch.delenv("MAXCODE_MOST_ROUNDS")
    assert rounds.reported_rounds(adaptive=True) == (LEAST_ROUNDS, MOST_ROUNDS)
    assert rounds.reported_rounds(adaptive=False) == (REPORTED_ROUNDS, None)
    monkeypatch.setenv("MAXCODE_MOST_ROUNDS", "2")
    assert rounds.reported_rounds(adaptive=True) == (2, 2)
    assert rounds.reported_rounds(adaptive=False) == (2, None)
    monkeypatch.setenv("MAXCODE_MOST_ROUNDS", str(REPORTED_ROUNDS + 1))
    assert rounds.reported_rounds(adaptive=False) == (REPORTED_ROUNDS, None)


@pytest.mark.parametrize("value", ["0", "many", "2.5"])
def test_a_bad_most_rounds_setting_is_one_line_of_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    """From ``eval``, and from ``optimize`` before it records a run."""
    monkeypatch.setenv("MAXCODE_MOST_ROUNDS", value)
    store = tmp_path / "runs.db"
    for done in (
        run_maxcode("eval", str(PROBLEM), str(CHEATS / "honest.py")),
        run_maxcode("optimize", str(PROBLEM), "--depth", "1", "--store", str(store)),
    ):
        assert done.returncode == 2, done.stdout
        assert done.stderr.startswith("error: MAXCODE_MOST_ROUNDS"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not store.exists()


def test_rounds_are_refused_for_a_cpp_task(tmp_path: Path) -> None:
    task = REPO / "examples" / "cpp" / "prime_sieve"
    done = run_maxcode("eval", str(task), str(task), "--rounds", "2")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: ") and "--rounds is for KernelBench" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_eval_help_states_the_reported_rounds() -> None:
    done = run_maxcode("eval", "--help")
    assert done.returncode == 0
    said = " ".join(done.stdout.split())
    assert f"None: {LEAST_ROUNDS}, and up to {MOST_ROUNDS} until" in said.replace("unset", "None")
    assert f"or {REPORTED_ROUNDS} when repeats is set" in said
    assert f"(KernelBench: {rounds.REPORTED_PRECISION:g})" in said


def test_eval_prints_each_rounds_speedup(capsys: pytest.CaptureFixture[str]) -> None:
    from maxcode.console import print_feedback

    print_feedback(combine([measured(s, (s / 1.02, s * 1.02)) for s in (1.012, 0.996, 1.004)]))
    printed = capsys.readouterr().out
    assert "in 3 rounds" in printed
    assert "rounds: 1.012x, 0.996x, 1.004x" in printed
