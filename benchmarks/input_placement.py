"""What drawing each timed input's page per call (worker ``timing.Timing._placed``) does to an
identical candidate's one-round speedups, side by side with the worker that does not draw.

Both are the real harness; the second writes each job's worker ``timing.py`` with the inputs
left where ``get_inputs`` made them. The two alternate, evaluation by evaluation, and per
variant it prints each round's speedup with its interval and calls per side, then the standard
deviation of the log speedup over the rounds and the lowest and highest speedup: a draw that
removes a bias moves the mean toward 1.0; one that only adds noise widens the spread.

python benchmarks/input_placement.py PROBLEM.py [--scale 0.1] [--pairs 8]

Run it on an idle machine (it measures the machine's noise too)."""

from __future__ import annotations

import argparse
import math
import os
import statistics
from pathlib import Path
from typing import Any

from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench import runner
from maxcode.kinds.load import load_task

PLACED = "self._placed(self.make_inputs(seed), seed)"
UNPLACED = "self.make_inputs(seed)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--pairs", type=int, default=8)
    options = parser.parse_args()
    task = load_task(str(options.problem), scale=options.scale)
    candidate = options.problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    written = runner.Job.write.__func__  # type: ignore[attr-defined]
    placed = {"on": True}

    def write(cls: Any, task: Any, source: str) -> Any:
        job = written(cls, task, source)
        if not placed["on"]:
            worker = job.worker / "timing.py"
            text = worker.read_text()
            if PLACED not in text:
                raise SystemExit("the worker no longer draws pages where this benchmark expects")
            os.chmod(worker, 0o644)
            worker.write_text(text.replace(PLACED, UNPLACED))
            os.chmod(worker, 0o444)
        return job

    runner.Job.write = classmethod(write)  # type: ignore[method-assign, assignment]
    speedups: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(options.pairs):
        for on in (True, False):
            placed["on"] = on
            feedback = evaluate_task(task, candidate)
            low, high = feedback.speedup_interval or (0.0, 0.0)
            speedups[on].append(feedback.speedup)
            print(
                f"{'drawn' if on else 'as made':<8} {feedback.speedup:.3f} "
                f"({low:.3f}-{high:.3f}) {feedback.repeats} calls",
                flush=True,
            )
    for on in (True, False):
        values = [value for value in speedups[on] if value > 0]
        spread = statistics.stdev(math.log(value) for value in values) if len(values) > 1 else 0
        print(
            f"{'drawn' if on else 'as made':<8} sd of log {100 * spread:.2f}%  "
            f"min {min(values):.3f}  max {max(values):.3f}  mean {statistics.fmean(values):.3f}"
        )


if __name__ == "__main__":
    main()
