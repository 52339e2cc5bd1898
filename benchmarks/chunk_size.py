"""How the size of a timed chunk and the least number of pairs move the noise of a KernelBench
speedup: identical candidates evaluated again and again, the settings alternated run by run.

For each problem (a bundled example's name, or a KernelBench problem file), this evaluates the
problem's own ``Model`` as ``ModelNew`` ``--runs`` times per setting, the settings taking turns
so that a change of the machine's load hits all of them alike, and prints per problem and
setting: the standard deviation of the log speedups (what noise gives an identical program;
0.01 is 1%), their max/min, the mean pairs counted, timed calls per side and seconds per
evaluation. A setting is ``MIN_PAIRS:CHUNK_S`` or ``MIN_PAIRS:CHUNK_S:CHUNK_SPAN_S`` (a span of 0:
no bound on a side's turn, as before 2026-11-28).

    python benchmarks/chunk_size.py 1_ScaledGELU
    python benchmarks/chunk_size.py KB/level2/47_Conv3d_Mish_Tanh.py --scale 0.1 --runs 8 \\
        --settings 4:0.05,8:0.015

It runs the evaluator in this process (``evaluate_task``) with the settings patched in; the
workers are the same as ``maxcode eval``'s. Timings need an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from pathlib import Path

from maxcode.harness import stats
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench import judge, schedule
from maxcode.kinds.kernelbench.settings import (
    CHUNK_S,
    CHUNK_SPAN_S,
    MIN_PAIRS,
    KernelBenchSettings,
)
from maxcode.kinds.load import load_task

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "examples" / "kernelbench"


@dataclasses.dataclass
class Setting:
    min_pairs: int
    chunk_s: float
    span_s: float = CHUNK_SPAN_S
    speedups: list[float] = dataclasses.field(default_factory=list)
    pairs: list[int] = dataclasses.field(default_factory=list)
    calls: list[int] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.min_pairs}:{self.chunk_s:g}:{self.span_s:g}"


class Patched:
    """``setting`` in force for the evaluations inside the ``with``: the chunks' seconds, and
    the least pairs of the evaluator's ``Stopping`` (which also sizes the chunks by it)."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.saved = (schedule.CHUNK_S, schedule.CHUNK_SPAN_S, KernelBenchSettings.stopping)

    def __enter__(self) -> None:
        setting, stopping = self.setting, self.saved[2]
        schedule.CHUNK_S = setting.chunk_s
        schedule.CHUNK_SPAN_S = setting.span_s if setting.span_s > 0 else 1e9

        def patched(settings: KernelBenchSettings) -> schedule.Stopping:
            return dataclasses.replace(stopping(settings), min_pairs=setting.min_pairs)

        KernelBenchSettings.stopping = patched  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        schedule.CHUNK_S, schedule.CHUNK_SPAN_S, KernelBenchSettings.stopping = self.saved  # type: ignore[method-assign]


class Counted:
    """Counts the pairs each evaluation's estimate used (the judge's estimate comes last)."""

    def __init__(self) -> None:
        self.last = 0
        self.real = stats.chunk_pair_speedup

    def __enter__(self) -> Counted:
        def counting(reference: list[list[float]], candidate: list[list[float]]) -> object:
            estimate = self.real(reference, candidate)
            self.last = estimate.pairs
            return estimate

        schedule.chunk_pair_speedup = judge.chunk_pair_speedup = counting  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        schedule.chunk_pair_speedup = judge.chunk_pair_speedup = self.real


def problem_path(name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".py" else BUNDLED / f"{name}.py"


def run(problem: str, scale: float, runs: int, settings: list[Setting]) -> None:
    path = problem_path(problem)
    task = load_task(str(path), scale=scale)
    source = path.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    with Counted() as counted:
        for _ in range(runs):
            for setting in settings:
                with Patched(setting):
                    started = time.perf_counter()
                    feedback = evaluate_task(task, source)
                    seconds = time.perf_counter() - started
                if not feedback.correct or not feedback.speedup:
                    print(f"  {setting.name}: no speedup ({feedback.error or feedback.suspect})")
                    continue
                setting.speedups.append(feedback.speedup)
                setting.pairs.append(counted.last)
                setting.calls.append(feedback.repeats or 0)
                setting.seconds.append(seconds)
    print(f"{path.stem} (scale {scale:g})")
    print(
        f"  {'setting':<10} {'sd(log)':>8} {'max/min':>8} {'pairs':>6} {'calls':>6} {'s/eval':>7}"
    )
    for setting in settings:
        logs = [math.log(value) for value in setting.speedups]
        if len(logs) < 2:
            print(f"  {setting.name:<10} too few results")
            continue
        print(
            f"  {setting.name:<10} {statistics.stdev(logs):>8.4f} "
            f"{math.exp(max(logs) - min(logs)):>8.4f} {statistics.fmean(setting.pairs):>6.1f} "
            f"{statistics.fmean(setting.calls):>6.0f} {statistics.fmean(setting.seconds):>7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument(
        "--settings",
        default=f"{MIN_PAIRS}:{CHUNK_S:g}:0,{MIN_PAIRS}:{CHUNK_S:g}:{CHUNK_SPAN_S:g}",
        help="MIN_PAIRS:CHUNK_S[:CHUNK_SPAN_S],... (default: turns of any length, then the "
        "current bound)",
    )
    options = parser.parse_args()
    for problem in options.problems:
        settings = []
        for item in options.settings.split(","):
            pairs, chunk_s, *span = item.split(":")
            settings.append(Setting(int(pairs), float(chunk_s), *(float(s) for s in span[:1])))
        run(problem, options.scale, options.runs, settings)


if __name__ == "__main__":
    main()
