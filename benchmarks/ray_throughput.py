"""Evaluation throughput: the local executor against Ray with 1 and 2 local workers.

The same jobs (every bundled C++ task's known fast rewrite, wall metric, 1 timed round, an
empty build cache each time) go through each executor in one run; the script prints
evaluations per second and the ratio to the local executor. Run:

    pip install 'maxcode[ray]'
    python benchmarks/ray_throughput.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from maxcode.executors import EvalJob, Executor, LocalExecutor
from maxcode.executors.ray_executor import RayExecutor
from maxcode.harness.settings import EvalSettings
from maxcode.kinds.load import load_task

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
FIXTURES = REPO / "tests" / "fixtures" / "cpp"


def clear_builds(home: Path) -> None:
    builds = home / "cache" / "build"
    if builds.is_dir():
        for entry in builds.iterdir():
            if not entry.name.startswith("init-"):
                shutil.rmtree(entry)


async def throughput(executor: Executor, jobs: list[EvalJob], home: Path) -> float:
    clear_builds(home)
    async with executor:
        started = time.perf_counter()
        results = await asyncio.gather(*(executor.evaluate(job) for job in jobs))
        elapsed = time.perf_counter() - started
    if not all(result.correct for result in results):
        raise SystemExit("an evaluation failed")
    return len(jobs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="maxcode-ray-bench-"))
    os.environ["MAXCODE_HOME"] = str(home)  # before Ray starts: its workers inherit it
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    jobs = [
        EvalJob(
            load_task(str(task)),
            (FIXTURES / task.name / "fast.cpp").read_text(),
            EvalSettings(repeats=1),
        )
        for task in sorted(EXAMPLES.iterdir())
        if (FIXTURES / task.name / "fast.cpp").is_file()
    ]
    asyncio.run(throughput(LocalExecutor(), jobs[:1], home))  # builds the sandbox init once
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = {
            "local executor (1 at a time)": asyncio.run(throughput(LocalExecutor(), jobs, home)),
            "ray, 1 worker": asyncio.run(throughput(RayExecutor(workers=1), jobs, home)),
            "ray, 2 workers": asyncio.run(throughput(RayExecutor(workers=2), jobs, home)),
        }
    finally:
        ray.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    base = results["local executor (1 at a time)"]
    print(f"{len(jobs)} evaluations per executor, {os.cpu_count()} CPUs")
    print(f"{'executor':<30} {'evals/s':>8} {'vs local':>9}")
    for name, rate in results.items():
        print(f"{name:<30} {rate:>8.2f} {rate / base:>8.2f}x")


if __name__ == "__main__":
    main()
