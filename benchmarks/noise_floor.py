"""The machine's own noise floor for a KernelBench speedup: the spread no harness can beat here.

``benchmarks/noise.py`` times the reference against itself through ``maxcode eval`` (two
sandboxed worker processes, chunks alternated by the parent). This script takes every cost of
that harness away and keeps only what the machine adds: in ONE process, pinned to the CPU the
harness times on, one thread, it alternates chunks of calls of two copies of the problem's
``Model`` on fresh inputs (made from seeds per chunk, as the workers make them), sized, stopped
and estimated by the harness's own rules (``chunk_calls``, ``Stopping`` with the default
timing budget, ``paired_speedup``). Nothing differs between the two sides but the moment they
run, so the spread of its estimates is the machine's: if it exceeds a target, so must the
harness's at the same budget.

Each repetition runs in a fresh process. Per problem and condition (idle; loaded: one core kept
busy by a spinning process), it prints max/min of ``--runs`` estimates at each ``--budget``
(seconds of the timing window; the harness's default first), and the mean pairs.

    python benchmarks/noise_floor.py          # 1_ScaledGELU and 4_Softmax, idle and loaded
    python benchmarks/noise_floor.py --case 1_ScaledGELU --condition idle --budget 2 --budget 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = ("1_ScaledGELU", "4_Softmax")
SPIN = "while True:\n    pass\n"

ONE = r"""
import copy, importlib.util, json, os, secrets, statistics, sys, time
import torch
from maxcode.evaluate.kernelbench.schedule import Stopping, chunk_calls, paired_speedup
from maxcode.evaluate.kernelbench.settings import KernelBenchSettings
from maxcode.evaluate.kernelbench.evaluator import timing_cpu

path, budget = sys.argv[1], float(sys.argv[2])
os.sched_setaffinity(0, {timing_cpu()})
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("problem", path)
problem = importlib.util.module_from_spec(spec)
spec.loader.exec_module(problem)
torch.manual_seed(0)
first = problem.Model(*problem.get_init_inputs()).eval()
second = copy.deepcopy(first)
draw = secrets.SystemRandom()

def inputs(seed):
    torch.manual_seed(seed)
    return problem.get_inputs()

def chunk(model, seeds):
    made = [inputs(seed) for seed in seeds]
    kept, times = [], []
    with torch.no_grad():
        for given in made:
            start = time.perf_counter()
            kept.append(model(*given))
            times.append(time.perf_counter() - start)
    return times

with torch.no_grad():  # warm-up, as the workers do (three calls each)
    for model in (first, second):
        for _ in range(3):
            start = time.perf_counter()
            out = model(*inputs(draw.randrange(2**63)))
            estimate = time.perf_counter() - start
size = sum(t.numel() * t.element_size() for t in inputs(0) if isinstance(t, torch.Tensor))
outputs = out if isinstance(out, (tuple, list)) else [out]
size += sum(t.numel() * t.element_size() for t in outputs)
settings = KernelBenchSettings()
base = settings.stopping()
stopping = Stopping(None, base.min_calls, base.max_calls, budget)
a, b = [], []
began = time.perf_counter()
while True:
    timed = [value for times in a for value in times]
    step = chunk_calls(statistics.median(timed) if timed else estimate, None, size, base.max_calls)
    calls = stopping.next_calls(step, a, b, time.perf_counter() - began)
    if not calls:
        break
    seeds = [draw.randrange(2**63) for _ in range(calls)]
    a.append(chunk(first, seeds))
    b.append(chunk(second, seeds))
estimate = paired_speedup(a, b)
print(json.dumps({"speedup": estimate.speedup, "pairs": estimate.pairs,
                  "seconds": time.perf_counter() - began}))
"""


def worker_heap() -> dict[str, str]:
    """The heap settings the workers run with, taken from the runner (kept freed memory, huge
    pages): the floor must not differ from the workers in them."""
    from maxcode.evaluate.kernelbench.runner import _environment

    every = _environment(Path("/nonexistent"), Path("/nonexistent"))
    return {key: value for key, value in every.items() if key.startswith(("MALLOC_", "GLIBC_"))}


def one(problem: Path, budget: float) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ONE, str(problem), str(budget)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **worker_heap()},
    )
    if done.returncode != 0:
        raise SystemExit(f"noise_floor: {problem.stem}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--case", action="append", choices=PROBLEMS)
    parser.add_argument("--condition", action="append", choices=("idle", "loaded"))
    parser.add_argument("--budget", action="append", type=float, help="seconds (repeatable)")
    options = parser.parse_args()
    from maxcode.evaluate.kernelbench.settings import KernelBenchSettings

    budgets = options.budget or [KernelBenchSettings().budget_s]
    print(
        f"{'case':<14} {'condition':<9} {'budget s':>8} {'max/min':>8} {'min':>6} {'max':>6} "
        f"{'pairs':>6}"
    )
    for condition in options.condition or ["idle", "loaded"]:
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "loaded" else None
        try:
            for name in options.case or PROBLEMS:
                problem = REPO / "examples" / "kernelbench" / f"{name}.py"
                for budget in budgets:
                    runs = [one(problem, budget) for _ in range(options.runs)]
                    speedups = [run["speedup"] for run in runs]
                    pairs = sum(run["pairs"] for run in runs) / len(runs)
                    print(
                        f"{name:<14} {condition:<9} {budget:>8.1f} "
                        f"{max(speedups) / min(speedups):>8.3f} {min(speedups):>6.3f} "
                        f"{max(speedups):>6.3f} {pairs:>6.0f}",
                        flush=True,
                    )
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()


if __name__ == "__main__":
    main()
