"""What counting a candidate's instructions costs, on one CPU and on all of this process's.

For every bundled C++ task with a known fast rewrite (``tests/fixtures/cpp/TASK/fast.cpp``),
``evaluate_task(..., metric="instructions")`` in this process (builds cached, the reference's
counts cached by a first evaluation, as in a search), alternated trial by trial:

- ``one CPU``: the tests counted one after the other (the process's CPUs seen as one);
- ``all CPUs``: the tests shared among the CPUs (``cpp._shares``), as ``maxcode`` does.

It prints the median seconds of each way, their ratio, and checks that both ways found the
same counts (instruction counts do not depend on what else runs).

    python benchmarks/instructions_eval.py [--trials 3] [TASK ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
FIXTURES = REPO / "tests" / "fixtures" / "cpp"


def counted(name: str, task: Any, source: str) -> tuple[float, list[float]]:
    """Seconds of one evaluation of ``source``, and its counts."""
    from maxcode.kinds import evaluate_task

    started = time.perf_counter()
    feedback = evaluate_task(task, source, metric="instructions")
    seconds = time.perf_counter() - started
    if not feedback.correct:
        raise SystemExit(f"{name}: not correct: {feedback.error}")
    return seconds, list(feedback.candidate_costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", nargs="*", help="bundled task names (default: all with fast.cpp)")
    parser.add_argument("--trials", type=int, default=3, help="evaluations per way and task")
    args = parser.parse_args()
    names = args.tasks or sorted(
        path.name for path in EXAMPLES.iterdir() if (FIXTURES / path.name / "fast.cpp").is_file()
    )
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="maxcode-bench-home-") as home:
        os.environ["MAXCODE_HOME"] = home
        from maxcode.kinds.load import load_task

        print(f"{len(cpus)} CPUs")
        print(f"{'task':<24} {'tests':>5} {'one CPU s':>10} {'all CPUs s':>11} {'ratio':>6}")
        for name in names:
            task = load_task(str(EXAMPLES / name))
            source = (FIXTURES / name / "fast.cpp").read_text()

            _, costs = counted(name, task, source)  # builds, and counts the reference once
            seconds: dict[str, list[float]] = {"one": [], "all": []}
            for _ in range(args.trials):
                with mock.patch.object(os, "sched_getaffinity", lambda pid: set(cpus[:1])):
                    one, one_costs = counted(name, task, source)
                every, every_costs = counted(name, task, source)
                if one_costs != costs or every_costs != costs:
                    raise SystemExit(f"{name}: the counts differ between the ways")
                seconds["one"].append(one)
                seconds["all"].append(every)
            one_s, all_s = (statistics.median(seconds[way]) for way in ("one", "all"))
            tests = len(task.tests)
            print(f"{name:<24} {tests:>5} {one_s:>10.2f} {all_s:>11.2f} {all_s / one_s:>6.2f}")


if __name__ == "__main__":
    main()
