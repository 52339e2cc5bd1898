"""What one sandboxed run costs the harness, against a bare bubblewrap run of the same binary.

A trivial C++ program (read two numbers, print their sum) runs ``--runs`` times each way,
alternating the ways ``--trials`` times, on one pinned CPU:

- ``bare bwrap``: one ``bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc`` start per
  run, stdin from the test file, stdout to a file (no isolation of the runs from each other
  beyond bwrap's own, no limits, no timing);
- ``harness batch``: ``Sandbox.run_batch`` with all runs in batches of ``--batch`` (what a
  C++ evaluation does per batch of rounds: every run with its own user, ipc and mount
  namespaces, fresh folders, limits, its CPU time and wall time taken by the init);
- ``harness, a start per run``: the same, a batch of one per run.

It prints seconds per run and the harness's ratio to bare bwrap (issue target: at most 1.3),
and for one ``sleep 0.2`` run the sandbox's start-up and the program's own time, which the
harness reports apart (the program's time excludes the start).

    python benchmarks/run_overhead.py [--runs 200] [--batch 24] [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

PROGRAM = """#include <cstdio>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    printf("%lld\\n", a + b);
}
"""


def _bare(binary: Path, stdin: Path, out: Path, runs: int, cpu: int) -> float:
    command = [
        "taskset", "-c", str(cpu),
        "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
        "--dev", "/dev", "--proc", "/proc", str(binary),
    ]  # fmt: skip
    began = time.perf_counter()
    for _ in range(runs):
        with stdin.open("rb") as given, out.open("wb") as taken:
            subprocess.run(command, stdin=given, stdout=taken, check=True)
    return (time.perf_counter() - began) / runs


def _harness(binary: Path, stdin: Path, runs: int, batch: int, cpu: int) -> float:
    from maxcode.harness.sandbox import Run, Sandbox

    sandbox = Sandbox("bwrap")
    plan = [Run(stdin=stdin, argv=(str(binary),)) for _ in range(runs)]
    began = time.perf_counter()
    for first in range(0, runs, batch):
        results = sandbox.run_batch(
            None, plan[first : first + batch], readonly=[binary.parent], cpu=cpu
        )
        assert all(result.exit_code == 0 for result in results), results[0]
    return (time.perf_counter() - began) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--trials", type=int, default=3)
    options = parser.parse_args()
    if shutil.which("bwrap") is None:
        raise SystemExit("needs bubblewrap")
    cpu = sorted(os.sched_getaffinity(0))[-1]
    with tempfile.TemporaryDirectory(prefix="maxcode-overhead-") as folder:
        root = Path(folder)
        root.chmod(0o755)
        source = root / "sum.cpp"
        source.write_text(PROGRAM)
        binary = root / "bin" / "sum"
        binary.parent.mkdir()
        subprocess.run(["g++", "-O2", "-o", str(binary), str(source)], check=True)
        binary.parent.chmod(0o755)
        stdin = root / "input.txt"
        stdin.write_text("1 2\n")
        stdin.chmod(0o644)
        seconds: dict[str, list[float]] = {
            "bare bwrap": [],
            "harness batch": [],
            "start per run": [],
        }
        for _ in range(options.trials):
            seconds["bare bwrap"].append(_bare(binary, stdin, root / "out.txt", options.runs, cpu))
            seconds["harness batch"].append(
                _harness(binary, stdin, options.runs, options.batch, cpu)
            )
            seconds["start per run"].append(_harness(binary, stdin, options.runs // 4, 1, cpu))
    from maxcode.harness.sandbox import Run, Sandbox

    (slept,) = Sandbox("bwrap").run_batch(("/bin/sh", "-c", "sleep 0.2"), [Run()], cpu=cpu)
    print(f"sleep 0.2: start-up {slept.startup_s * 1000:.1f} ms, program {slept.wall_s:.3f} s")
    bare = statistics.median(seconds["bare bwrap"])
    for way, values in seconds.items():
        median = statistics.median(values)
        print(f"{way:<16} {median * 1000:7.2f} ms a run   {median / bare:5.2f}x bare bwrap")


if __name__ == "__main__":
    main()
