"""KernelBench evaluation on this machine: what one evaluation costs, phase by phase, and what
it measures.

For each problem in ``examples/kernelbench`` (or the ones named: a file, or a bundled
problem's name such as ``2_SumReduction``) it evaluates, through the real
harness (sandboxed workers, the reference and the candidate timed in one window), once to build
and warm the caches (not reported) and then ``--trials`` more times:

- ``--candidate identical`` (default): ``class ModelNew(Model): pass`` appended to the
  problem, the candidate an evaluation should score 1.0x, as cheaply as possible;
- ``--candidate fixture``: the hand-written ``ModelNew`` of
  ``tests/fixtures/kernelbench/<problem>/<device>.py``.

Per problem it prints the median over the trials of the evaluation's wall time and of each of
``Feedback.phases`` (see ``maxcode.kinds.kernelbench.evaluator.PHASES``), the seconds spent
outside the timed window, the timed calls per side, and the speedups seen (lowest-highest,
geometric mean, standard deviation of the log in %) with the widest 95% interval.
``--compile-baseline`` also times ``torch.compile`` of the reference.

``--alternate NAME=VALUE`` makes every trial twice in a row, as configured and with that
environment variable set (``MAXCODE_PIN=start``: workers pinned from their start), and prints a
row for each way and the ratio of their evaluations' wall times. ``--rounds`` is the rounds of
an evaluation: 1 (the default) as a search screens; ``--reported`` takes them as ``maxcode eval``
does (``rounds.LEAST_ROUNDS`` and more until the interval is narrow; the label then says how many
rounds the trials took).

    python benchmarks/kernelbench_eval.py [PROBLEM.py ...] [--device cpu|cuda] [--trials 3]
        [--candidate identical|fixture] [--compile-baseline] [--scale 0.1]
        [--alternate NAME=VALUE] [--rounds 1 | --reported]

Run it on an idle machine: the figures are the harness's cost, and other work inflates them.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from unittest import mock

from maxcode.errors import MaxcodeError
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench.evaluator import PHASES
from maxcode.kinds.kernelbench.problem import kernelbench_suite
from maxcode.kinds.load import load_task
from maxcode.tasks.model import Task
from maxcode.types import Feedback

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "examples" / "kernelbench"
SHOWN = [phase for phase in PHASES if phase != "kernels"]


def bundled(name: Path) -> Path:
    """A problem file, or a bundled problem by its name (``2_SumReduction``)."""
    named = BUNDLED / f"{name}.py"
    return named if not name.exists() and named.is_file() else name


def candidate_source(problem: Path, kind: str, device: str) -> str:
    if kind == "identical":
        return problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    fixture = REPO / "tests" / "fixtures" / "kernelbench" / problem.stem / f"{device}.py"
    return fixture.read_text()


def evaluate(task: Task, source: str, options: argparse.Namespace) -> Feedback:
    return evaluate_task(
        task,
        source,
        device=options.device,
        compile_baseline=options.compile_baseline,
        rounds=None if options.reported else options.rounds,
        reported=options.reported,
    )


def row(label: str, walls: list[float], runs: list[Feedback]) -> str:
    """One problem's figures, one way: medians over the trials."""
    phases = {
        phase: statistics.median(run.phases.get(phase, 0.0) for run in runs) for phase in SHOWN
    }
    wall = statistics.median(walls)
    outside = wall - phases["timing"]
    speedups = [run.speedup for run in runs]
    intervals = [run.speedup_interval for run in runs if run.speedup_interval]
    widest = max(intervals, key=lambda pair: pair[1] / pair[0], default=None)
    calls = statistics.median(run.repeats for run in runs)
    taken = [run.kernelbench.rounds for run in runs if run.kernelbench]
    label = f"{label} ({min(taken)}-{max(taken)}r)" if taken and max(taken) > 1 else label
    shown = " ".join(f"{phases[phase]:>8.2f}" for phase in SHOWN)
    spread = f"{min(speedups):.3f}-{max(speedups):.3f}"
    ci = f"{widest[0]:.3f}-{widest[1]:.3f}" if widest else "-"
    logs = [math.log(value) for value in speedups if value > 0]
    mean = f"{math.exp(statistics.fmean(logs)):.3f}" if logs else "-"
    sd = f"{100 * statistics.stdev(logs):.2f}" if len(logs) > 1 else "-"
    return (
        f"{label:<24} {wall:>6.2f} {shown} {outside:>7.2f} {calls:>5.0f} {spread:>13} "
        f"{mean:>6} {sd:>5} {ci:>15}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--candidate", choices=["identical", "fixture"], default="identical")
    parser.add_argument("--compile-baseline", action="store_true")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="sizes scaled as maxcode eval --scale does"
    )
    parser.add_argument("--alternate", metavar="NAME=VALUE", help="also each trial this way")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds per evaluation (1: a search's screening)"
    )
    parser.add_argument(
        "--reported",
        action="store_true",
        help="rounds as maxcode eval takes them (until the interval is narrow; not --rounds)",
    )
    options = parser.parse_args()
    ways: tuple[dict[str, str], ...] = ({},)
    if options.alternate:
        name, equals, value = options.alternate.partition("=")
        if not equals or not name:
            parser.error("--alternate takes NAME=VALUE")
        ways = ({}, {name: value})
    problems = [bundled(problem) for problem in options.problems] or kernelbench_suite(BUNDLED)
    # Every problem loaded before anything runs: a wrong name is one line, not a traceback
    # after minutes of the problems before it.
    tasks = []
    for problem in problems:
        try:
            tasks.append((problem, load_task(str(problem), scale=options.scale)))
        except MaxcodeError as error:
            parser.error(str(error))
    header = f"{'problem':<24} {'eval s':>6} " + " ".join(f"{p[:8]:>8}" for p in SHOWN)
    print(
        header
        + f" {'outside':>7} {'calls':>5} {'speedups':>13} {'mean':>6} {'sd%':>5} {'widest CI':>15}"
    )
    for problem, task in tasks:
        source = candidate_source(problem, options.candidate, options.device)

        evaluate(task, source, options)  # builds, caches, the roofline: once per task
        walls: list[list[float]] = [[] for _ in ways]
        runs: list[list[Feedback]] = [[] for _ in ways]
        for _ in range(options.trials):
            for way, setting in enumerate(ways):
                with mock.patch.dict(os.environ, setting):
                    started = time.perf_counter()
                    feedback = evaluate(task, source, options)
                    walls[way].append(time.perf_counter() - started)
                if not feedback.correct:
                    raise SystemExit(f"{problem.stem}: {feedback.error}")
                runs[way].append(feedback)
        for way, setting in enumerate(ways):
            label = "".join(f"  {name}={value}" for name, value in setting.items())
            label = label or problem.stem
            print(row(label[:24], walls[way], runs[way]), flush=True)
        if len(ways) > 1:
            ratio = statistics.median(walls[0]) / statistics.median(walls[1])
            print(f"  {'eval s, as configured / alternate':<34} {ratio:.2f}", flush=True)
    print("speedups: min-max, geometric mean and sd of the log (%) over the trials")
    print("phases: " + "; ".join(f"{name}: {what}" for name, what in PHASES.items()))


if __name__ == "__main__":
    main()
