"""Noise of a measured speedup: the reference judged as its own candidate, again and again.

A program equal to the reference is 1.00x by definition; what ``maxcode eval`` reports for it
is noise. For two C++ tasks and two KernelBench problems (the problem's own ``Model`` as
``ModelNew``), this runs ``maxcode eval TASK CANDIDATE --json`` as a user would, ``--runs``
times per case, on an idle machine and again with one core kept busy by a spinning process,
and prints per case and condition: the max/min ratio of the speedups (the spread noise gives;
target at most 1.02 idle and 1.05 loaded), the lowest and highest speedup, how many 95%
intervals contain 1.0, the mean rounds (C++: timed rounds; KernelBench: rounds of fresh
worker pairs) and the mean seconds per evaluation. For KernelBench it also splits the noise
(standard deviations of the log speedup, in %): ``sd`` between evaluations, ``round sd`` between
the rounds of one evaluation (each round's own speedup, ``per_round`` in the JSON), and
``shared``, the part of an evaluation's error that all its rounds share:
``sqrt(sd^2 - round_sd^2 / rounds)``, zero when the rounds are independent draws. More rounds
shrink only what is not shared.

Run it on a machine nothing else is using (it measures the machine's own noise):

    python benchmarks/noise.py                      # every case, idle and loaded, 6 runs
    python benchmarks/noise.py --case pair_count_quadratic --condition idle --runs 3
    python benchmarks/noise.py --json               # one JSON object on stdout
    python benchmarks/noise.py --case 1_ScaledGELU --condition idle --repeats 400
    python benchmarks/noise.py --alternate MAXCODE_PIN=start   # two ways, side by side

``--alternate NAME=VALUE`` makes every evaluation twice in a row, as configured and with that
environment variable set, and prints a row for each way: two settings compared under the
same drift of the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CPP_TASKS = ("pair_count_quadratic", "prime_sieve")
KERNELBENCH_PROBLEMS = ("1_ScaledGELU", "4_Softmax")
CONDITIONS = ("idle", "loaded")
TARGET = {"idle": 1.02, "loaded": 1.05}
MAXCODE = (sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()")
"""The installed command line, as a user runs it (`maxcode ...`)."""
SPIN = "while True:\n    pass\n"


@dataclass
class Case:
    """One task with the reference as its own candidate."""

    name: str
    task: str
    candidate: str


@dataclass
class Measured:
    """What ``--runs`` evaluations of one case under one condition gave."""

    case: str
    condition: str
    speedups: list[float] = field(default_factory=list)
    intervals: list[list[float] | None] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    per_round: list[list[float]] = field(default_factory=list)
    """KernelBench: each evaluation's rounds' own speedups."""

    @property
    def spread(self) -> float | None:
        """max/min of the speedups (1.0: no noise at all)."""
        positive = [value for value in self.speedups if value > 0]
        return max(positive) / min(positive) if positive else None

    @property
    def sd(self) -> float | None:
        """Standard deviation of the log speedup between evaluations."""
        logs = [math.log(value) for value in self.speedups if value > 0]
        return statistics.stdev(logs) if len(logs) > 1 else None

    @property
    def round_sd(self) -> float | None:
        """Pooled standard deviation of the log speedup between the rounds of an evaluation."""
        squares, freedom = 0.0, 0
        for speedups in self.per_round:
            logs = [math.log(value) for value in speedups if value > 0]
            if len(logs) > 1:
                mean = statistics.fmean(logs)
                squares += sum((log - mean) ** 2 for log in logs)
                freedom += len(logs) - 1
        return math.sqrt(squares / freedom) if freedom else None

    @property
    def shared(self) -> float | None:
        """The part of ``sd`` that all rounds of an evaluation share (more rounds cannot
        shrink it): what is left of its variance once the rounds' own, divided by their count,
        is taken out; None without per-round speedups."""
        within, between = self.round_sd, self.sd
        counts = [len(speedups) for speedups in self.per_round if len(speedups) > 1]
        if within is None or between is None or not counts:
            return None
        rounds = statistics.fmean(counts)
        return math.sqrt(max(0.0, between**2 - within**2 / rounds))

    @property
    def covering(self) -> int:
        """Intervals that contain 1.0 (the truth for an identical program)."""
        return sum(1 for pair in self.intervals if pair and pair[0] <= 1.0 <= pair[1])


def cases(folder: Path) -> list[Case]:
    """The four cases; KernelBench candidates are written into ``folder``."""
    found = [
        Case(name, str(REPO / "examples" / "cpp" / name), str(REPO / "examples" / "cpp" / name))
        for name in CPP_TASKS
    ]
    for name in CPP_TASKS:
        found[CPP_TASKS.index(name)].candidate = str(
            REPO / "examples" / "cpp" / name / "reference.cpp"
        )
    for name in KERNELBENCH_PROBLEMS:
        problem = REPO / "examples" / "kernelbench" / f"{name}.py"
        candidate = folder / f"{name}_identical.py"
        candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
        found.append(Case(name, str(problem), str(candidate)))
    return found


def evaluate(
    case: Case,
    repeats: int | None = None,
    rounds: int | None = None,
    setting: dict[str, str] | None = None,
) -> tuple[dict[str, object] | None, float, str]:
    """One ``maxcode eval --json`` of a case (``setting``: environment variables set for it):
    its JSON (None on failure), seconds, error."""
    started = time.perf_counter()
    fixed = ["--repeats", str(repeats), "--no-compile-baseline"] if repeats else []
    if rounds and case.name in KERNELBENCH_PROBLEMS:
        fixed += ["--rounds", str(rounds)]
    done = subprocess.run(
        [*MAXCODE, "eval", case.task, case.candidate, "--json", *fixed],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(setting or {})},
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return None, seconds, (done.stderr.strip().splitlines() or ["failed"])[-1]
    result = json.loads(done.stdout)
    if not result.get("correct"):
        return None, seconds, str(result.get("error"))
    return result, seconds, ""


class Spinner:
    """One process spinning on a core for as long as the condition lasts."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Spinner:
        self.process = subprocess.Popen([sys.executable, "-c", SPIN])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


def measure(
    case: Case,
    condition: str,
    runs: int,
    repeats: int | None = None,
    rounds: int | None = None,
    ways: tuple[dict[str, str], ...] = ({},),
) -> list[Measured]:
    """``runs`` evaluations of ``case`` each way (environment variables set), alternated."""
    named = [
        Measured(case.name + "".join(f" {name}={value}" for name, value in way.items()), condition)
        for way in ways
    ]
    for _ in range(runs):
        for measured, way in zip(named, ways):
            _add(measured, *evaluate(case, repeats, rounds, way))
    return named


def _add(measured: Measured, result: dict[str, object] | None, seconds: float, error: str) -> None:
    """One evaluation's outcome into ``measured``."""
    measured.seconds.append(seconds)
    if result is None:
        measured.errors.append(error)
        return
    if result.get("suspect"):
        # Void: a finding against a program equal to the reference, which is false by
        # definition; said as an error, not counted as a speedup of 0.
        measured.errors.append(f"void: {result['suspect']}")
        return
    measured.speedups.append(float(result["speedup"]))  # type: ignore[arg-type]
    interval = result.get("speedup_interval")
    measured.intervals.append(list(interval) if interval else None)  # type: ignore[call-overload]
    # C++: timed rounds (a process each); KernelBench: rounds of fresh worker pairs.
    rounds_run = result.get("rounds") or result.get("repeats") or 0
    measured.rounds.append(int(rounds_run))  # type: ignore[call-overload]
    each = result.get("per_round") or []
    measured.per_round.append([float(done["speedup"]) for done in each])  # type: ignore[attr-defined]


def table(results: list[Measured], conditions: list[str]) -> str:
    """Per case, each condition side by side."""
    width = max([22, *(len(measured.case) for measured in results)])
    head = f"{'case':<{width}}" + "".join(
        f" | {condition + ' max/min':>15} {'min':>6} {'max':>6} {'in CI':>5} {'rounds':>6} "
        f"{'s/eval':>6} {'sd%':>5} {'round':>5} {'shared':>6}"
        for condition in conditions
    )
    lines = [head, "-" * len(head)]
    by_case: dict[str, dict[str, Measured]] = {}
    for result in results:
        by_case.setdefault(result.case, {})[result.condition] = result
    for name, by_condition in by_case.items():
        line = f"{name:<{width}}"
        for condition in conditions:
            measured = by_condition.get(condition)
            if measured is None or measured.spread is None:
                line += f" | {'failed':>15}{'':53}"  # the other eight columns blank
                continue
            mark = "ok" if measured.spread <= TARGET[condition] else "OVER"
            rounds = sum(measured.rounds) / len(measured.rounds) if measured.rounds else 0
            line += (
                f" | {measured.spread:>10.3f} {mark:>4} {min(measured.speedups):>6.3f} "
                f"{max(measured.speedups):>6.3f} {measured.covering:>2}/{len(measured.speedups):<2}"
                f" {rounds:>6.0f} {sum(measured.seconds) / len(measured.seconds):>6.1f}"
                f" {_percent(measured.sd):>5} {_percent(measured.round_sd):>5}"
                f" {_percent(measured.shared):>6}"
            )
        lines.append(line)
    targets = ", ".join(f"{condition} <= {TARGET[condition]}" for condition in conditions)
    lines.append(f"target max/min: {targets}")
    lines.append(
        "sd%: between evaluations; round: between one evaluation's rounds; shared: the part "
        "of sd all rounds share (standard deviations of the log speedup, %)"
    )
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="evaluations per case and condition")
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    parser.add_argument("--condition", action="append", choices=CONDITIONS)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--repeats",
        type=int,
        help="a fixed number of timed calls (KernelBench) or rounds (C++) per evaluation, "
        "without the torch.compile baseline: what stays of the spread when the timing window "
        "is not what limits it (a bias that lasts a whole process)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="KernelBench: rounds of fresh worker pairs per evaluation (default: maxcode "
        "eval's, the number a reported speedup takes)",
    )
    parser.add_argument(
        "--alternate",
        metavar="NAME=VALUE",
        help="each evaluation also made with this environment variable set, right after",
    )
    options = parser.parse_args()
    conditions = options.condition or list(CONDITIONS)
    ways: tuple[dict[str, str], ...] = ({},)
    if options.alternate:
        name, equals, value = options.alternate.partition("=")
        if not equals or not name:
            parser.error("--alternate takes NAME=VALUE")
        ways = ({}, {name: value})
    with tempfile.TemporaryDirectory(prefix="maxcode-noise-") as folder:
        chosen = [
            case for case in cases(Path(folder)) if not options.case or case.name in options.case
        ]
        if not chosen:
            parser.error(f"no such case; the cases: {', '.join(CPP_TASKS + KERNELBENCH_PROBLEMS)}")
        results: list[Measured] = []
        for condition in conditions:
            print(f"{condition}: {len(chosen)} case(s) x {options.runs} runs", file=sys.stderr)
            with Spinner() if condition == "loaded" else contextlib.nullcontext():
                for case in chosen:
                    results += measure(
                        case, condition, options.runs, options.repeats, options.rounds, ways
                    )
    for measured in results:
        for error in measured.errors:
            print(f"{measured.case} ({measured.condition}): {error}", file=sys.stderr)
    if options.json:
        payload = [
            {
                **asdict(measured),
                "spread": measured.spread,
                "in_interval": measured.covering,
                "sd": measured.sd,
                "round_sd": measured.round_sd,
                "shared": measured.shared,
            }
            for measured in results
        ]
        print(json.dumps({"cpus": os.cpu_count(), "results": payload, "target": TARGET}))
        return
    print(table(results, conditions))


if __name__ == "__main__":
    main()
