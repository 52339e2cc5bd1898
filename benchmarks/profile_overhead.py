"""What collecting profiles costs, as a share of one evaluation's wall time.

For every bundled C++ task it evaluates the known fast rewrite (``tests/fixtures/cpp/<task>/
fast.cpp``), and for every bundled KernelBench problem its CPU kernel (``tests/fixtures/
kernelbench/<problem>/cpu.py``), each with profiling on, and prints side by side the
evaluation's wall time, the seconds spent collecting the profile (C++: a debug build and a
callgrind run with cache simulation; KernelBench: torch.profiler around three forwards of the
reference and of the candidate) and their ratio. Builds are warmed first, so a cached build is
what a search sees after its first evaluation of a program.

    python benchmarks/profile_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench.problem import kernelbench_suite
from maxcode.kinds.load import load_task

REPO = Path(__file__).resolve().parent.parent


def _measure(task_spec: Path, source: str, rounds: int, **options: object) -> tuple[float, float]:
    task = load_task(str(task_spec))
    evaluate_task(task, source, profile=True, **options)  # type: ignore[arg-type]  # warm builds
    walls, profiles = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        feedback = evaluate_task(task, source, profile=True, **options)  # type: ignore[arg-type]
        walls.append(time.perf_counter() - started)
        if not feedback.correct or feedback.profile_seconds is None:
            raise SystemExit(f"{task.name}: {feedback.summary()}")
        profiles.append(feedback.profile_seconds)
    return statistics.median(walls), statistics.median(profiles)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    rows = []
    for folder in sorted((REPO / "examples" / "cpp").iterdir()):
        fast = REPO / "tests" / "fixtures" / "cpp" / folder.name / "fast.cpp"
        wall, spent = _measure(folder, fast.read_text(), options.repeats, repeats=3)
        rows.append(("cpp", folder.name, wall, spent))
    for problem in kernelbench_suite(REPO / "examples" / "kernelbench"):
        kernel = REPO / "tests" / "fixtures" / "kernelbench" / problem.stem / "cpu.py"
        wall, spent = _measure(problem, kernel.read_text(), options.repeats)
        rows.append(("kernelbench", problem.stem, wall, spent))
    print(f"{'kind':<12} {'task':<22} {'eval s':>7} {'profile s':>9} {'share':>6}")
    for kind, name, wall, spent in rows:
        print(f"{kind:<12} {name:<22} {wall:>7.2f} {spent:>9.2f} {spent / wall:>6.0%}")
    for kind in ("cpp", "kernelbench"):
        shares = [spent / wall for k, _, wall, spent in rows if k == kind]
        median = statistics.median(shares)
        print(f"{kind}: median share of evaluation time spent profiling {median:.0%}")


if __name__ == "__main__":
    main()
