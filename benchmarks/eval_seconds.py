"""How long ``maxcode eval`` takes to report a clear speedup of a program of about 150 ms.

The task is ``pair_count_quadratic`` with nine generated tests, sized so that the reference
(quadratic) takes about 150 ms over all of them (``--size`` numbers per test); the candidate
is its bundled ``O(n log n)`` rewrite. ``maxcode eval TASK fast.cpp --json`` runs ``--runs``
times, as a user runs it (a fresh interpreter each time, an empty build cache the first
time), and the script prints each run's seconds, speedup, interval and rounds, and the
spread of the seconds (max/min). Issue target: at most 15 s, spread within 8%, on an idle machine.

    python benchmarks/eval_seconds.py [--runs 3] [--size 8000] [--precision 0.02]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "cpp" / "pair_count_quadratic"
FAST = REPO / "tests" / "fixtures" / "cpp" / "pair_count_quadratic" / "fast.cpp"
MAXCODE = (sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()")


def _answer(values: list[int], k: int) -> int:
    ordered = sorted(values)
    count, right = 0, len(ordered) - 1
    for left in range(len(ordered)):
        while right > left and ordered[left] + ordered[right] > k:
            right -= 1
        if right <= left:
            break
        count += right - left
    return count


def _task(folder: Path, size: int) -> Path:
    """The task folder with nine tests of ``size`` numbers each (seeded: the same every run)."""
    task = folder / "pair_count_150ms"
    (task / "tests").mkdir(parents=True)
    shutil.copy(EXAMPLE / "reference.cpp", task / "reference.cpp")
    (task / "task.toml").write_text('name = "pair_count_150ms"\nkind = "cpp"\n')
    draw = random.Random(7)
    for index in range(9):
        values = [draw.randint(-(10**9), 10**9) for _ in range(size)]
        k = draw.randint(-(10**9), 10**9)
        (task / "tests" / f"input.{index}.txt").write_text(
            f"{size} {k}\n" + " ".join(map(str, values)) + "\n"
        )
        (task / "tests" / f"output.{index}.txt").write_text(f"{_answer(values, k)}\n")
    return task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", type=int, default=8000, help="numbers per test")
    parser.add_argument("--precision", type=float, default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="maxcode-eval-seconds-") as folder:
        task = _task(Path(folder), options.size)
        extra = ["--precision", str(options.precision)] if options.precision else []
        seconds = []
        for run in range(options.runs):
            began = time.perf_counter()
            done = subprocess.run(
                [*MAXCODE, "eval", str(task), str(FAST), "--json", *extra],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            took = time.perf_counter() - began
            if done.returncode != 0:
                raise SystemExit(done.stderr.strip())
            result = json.loads(done.stdout)
            reference_s = sum(result["reference_costs"])
            seconds.append(took)
            low, high = result["speedup_interval"]
            print(
                f"run {run + 1}: {took:5.1f} s  speedup {result['speedup']:.2f} "
                f"({low:.2f}-{high:.2f})  rounds {result['repeats']}  "
                f"reference {reference_s * 1000:.0f} ms over the tests"
            )
    print(f"max/min of the seconds: {max(seconds) / min(seconds):.3f}")


if __name__ == "__main__":
    main()
