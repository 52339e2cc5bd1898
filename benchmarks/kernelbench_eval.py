"""KernelBench evaluation on this machine: the bundled problems against their custom kernels.

For each problem in ``examples/kernelbench`` it evaluates the hand-written ``ModelNew`` of
``tests/fixtures/kernelbench/<problem>/<device>.py`` through the real harness (sandboxed
workers, torch.compile baseline on), once to build (not reported) and then ``--trials`` more
times, and prints side by side per problem: eager, torch.compile and candidate per-call
medians, the speedups, and what one evaluation costs in wall time against the time spent in
timed calls (the harness's overhead).

    python benchmarks/kernelbench_eval.py [--device cpu|cuda] [--trials 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from maxcode.evaluate import evaluate_task
from maxcode.tasks import kernelbench_suite, load_task

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--trials", type=int, default=3)
    options = parser.parse_args()
    print(
        f"{'problem':<18} {'eager ms':>9} {'compile ms':>10} {'cand ms':>9} {'vs eager':>8} "
        f"{'vs compile':>10} {'eval s':>7} {'timed s':>7}"
    )
    for problem in kernelbench_suite(REPO / "examples" / "kernelbench"):
        task = load_task(str(problem))
        fixture = (
            REPO / "tests" / "fixtures" / "kernelbench" / problem.stem / f"{options.device}.py"
        )
        source = fixture.read_text()
        evaluate_task(task, source, device=options.device, compile_baseline=True)  # build
        rows = []
        for _ in range(options.trials):
            started = time.perf_counter()
            feedback = evaluate_task(task, source, device=options.device, compile_baseline=True)
            wall = time.perf_counter() - started
            if not feedback.correct:
                raise SystemExit(f"{problem.stem}: {feedback.error}")
            timed = sum(
                stats.median_s * stats.trials
                for name, stats in feedback.timings.items()
                if name in ("reference", "candidate", "compile")
            )
            rows.append((feedback, wall, timed))
        # The run with the median speedup, shown whole.
        feedback, _, _ = sorted(rows, key=lambda row: row[0].speedup)[(len(rows) - 1) // 2]
        eager, compiled, candidate = (
            feedback.timings[name].median_s * 1e3 for name in ("reference", "compile", "candidate")
        )
        wall = statistics.median(row[1] for row in rows)
        timed = statistics.median(row[2] for row in rows)
        print(
            f"{problem.stem:<18} {eager:>9.3f} {compiled:>10.3f} {candidate:>9.3f} "
            f"{feedback.speedup:>7.2f}x {feedback.speedup_vs_compile or 0:>9.2f}x "
            f"{wall:>7.1f} {timed:>7.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
