"""The machine's own noise floor for a KernelBench speedup: the spread no harness can beat here.

``benchmarks/noise.py`` times the reference against itself through ``maxcode eval`` (two
sandboxed worker processes, chunks alternated by the parent). This script takes every cost of
that harness away and keeps only what the machine adds: in ONE process, pinned to the CPU the
harness times on, one thread, it alternates chunks of calls of two copies of the problem's
``Model`` on fresh inputs (made from seeds per chunk, as the workers make them), sized, stopped
and estimated by the harness's own rules (``chunk_calls``, ``Stopping`` with the default
timing budget, ``chunk_pair_speedup``). Nothing differs between the two sides but the moment
they run, so the spread of its estimates is the machine's: if it exceeds a target, so must the
harness's at the same budget.

Each repetition runs in a fresh process. Per problem and condition (idle; loaded: one core kept
busy by a spinning process), it prints max/min of ``--runs`` estimates at each ``--budget``
(seconds of the timing window; the harness's default first) and ``--target`` (the interval's
half-width that stops the window; the harness's default), their standard deviation (of the
log, %), and the mean pairs, calls (both sides) and window seconds.

``--inputs`` (repeatable, alternated run by run) asks what making the inputs elsewhere would
buy: the ways are ``MADE``'s.

    python benchmarks/noise_floor.py          # 1_ScaledGELU and 4_Softmax, idle and loaded
    python benchmarks/noise_floor.py --case 1_ScaledGELU --condition idle --budget 2 --budget 8
    python benchmarks/noise_floor.py --condition idle --budget 8 --target 0.01 \\
        --inputs fresh --inputs premade --inputs maker
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = ("1_ScaledGELU", "4_Softmax")
SPIN = "while True:\n    pass\n"
MADE = ("fresh", "premade", "maker")
"""How a timed call's inputs are made: from its seed on the timing CPU, as the workers make
them (``fresh``); copied from inputs made before the window (``premade``: what the calls would
cost if another process made the inputs and the worker only placed them); ``premade`` with a
process making inputs of the problem's size on the other CPU all along (``maker``: what that
other process would add to the timed calls)."""

MAKER = r"""
import importlib.util, os, sys
import torch
from maxcode.harness.turns import timing_cpu
os.sched_setaffinity(0, set(range(os.cpu_count() or 1)) - {timing_cpu()} or {timing_cpu()})
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("problem", sys.argv[1])
problem = importlib.util.module_from_spec(spec)
spec.loader.exec_module(problem)
problem.get_inputs()
print("ready", flush=True)
seed = 0
while True:
    seed += 1
    torch.manual_seed(seed)
    problem.get_inputs()
"""

ONE = r"""
import copy, importlib.util, json, os, secrets, statistics, sys, time
import torch
from maxcode.kinds.kernelbench.schedule import Stopping, chunk_calls
from maxcode.harness.stats import chunk_pair_speedup
from maxcode.kinds.kernelbench.settings import KernelBenchSettings
from maxcode.harness.turns import timing_cpu

path, budget, made_how, target = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
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

POOL = [inputs(draw.randrange(2**63)) for _ in range(8)] if made_how != "fresh" else []

def fresh(seed):  # a call's inputs, made as MADE says
    if not POOL:
        return inputs(seed)
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in POOL[seed % len(POOL)]]

def chunk(model, seeds):
    made = [fresh(seed) for seed in seeds]
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
    start = time.perf_counter()
    fresh(draw.randrange(2**63))
    inputs_s = time.perf_counter() - start
size = sum(t.numel() * t.element_size() for t in inputs(0) if isinstance(t, torch.Tensor))
outputs = out if isinstance(out, (tuple, list)) else [out]
size += sum(t.numel() * t.element_size() for t in outputs)
settings = KernelBenchSettings()
base = settings.stopping()
stopping = Stopping(None, base.min_calls, base.max_calls, budget, target=target)
a, b = [], []
began = time.perf_counter()
while True:
    timed = [value for times in a for value in times]
    so_far = sum(len(times) for times in a + b)
    span = (time.perf_counter() - began) / so_far if so_far else estimate + inputs_s
    call = statistics.median(timed) if timed else estimate
    step = chunk_calls(call, None, size, base.max_calls, span_s=span)
    calls = stopping.next_calls(step, a, b, time.perf_counter() - began)
    if not calls:
        break
    seeds = [draw.randrange(2**63) for _ in range(calls)]
    a.append(chunk(first, seeds))
    b.append(chunk(second, seeds))
estimate = chunk_pair_speedup(a, b)
print(json.dumps({"speedup": estimate.speedup, "pairs": estimate.pairs, "calls": so_far,
                  "seconds": time.perf_counter() - began}))
"""


def worker_heap() -> dict[str, str]:
    """The heap settings the workers run with, taken from the runner (kept freed memory, huge
    pages): the floor must not differ from the workers in them."""
    from maxcode.kinds.kernelbench.runner import _environment

    every = _environment(Path("/nonexistent"), Path("/nonexistent"))
    return {key: value for key, value in every.items() if key.startswith(("MALLOC_", "GLIBC_"))}


def one(problem: Path, budget: float, made: str, target: float) -> dict[str, float]:
    maker = None
    if made == "maker":
        maker = subprocess.Popen(
            [sys.executable, "-c", MAKER, str(problem)], stdout=subprocess.PIPE, text=True
        )
        assert maker.stdout is not None
        maker.stdout.readline()
    try:
        done = subprocess.run(
            [sys.executable, "-c", ONE, str(problem), str(budget), made, str(target)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **worker_heap()},
        )
    finally:
        if maker is not None:
            maker.kill()
            maker.wait()
    if done.returncode != 0:
        raise SystemExit(f"noise_floor: {problem.stem}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--case", action="append", choices=PROBLEMS)
    parser.add_argument("--condition", action="append", choices=("idle", "loaded"))
    parser.add_argument("--budget", action="append", type=float, help="seconds (repeatable)")
    parser.add_argument("--target", type=float, help="the interval's half-width that stops")
    parser.add_argument("--inputs", action="append", choices=MADE, help="(repeatable) see MADE")
    options = parser.parse_args()
    from maxcode.kinds.kernelbench.settings import KernelBenchSettings

    budgets = options.budget or [KernelBenchSettings().budget_s]
    target = options.target or KernelBenchSettings().stopping().target
    ways = options.inputs or ["fresh"]
    print(
        f"{'case':<14} {'condition':<9} {'inputs':<8} {'budget s':>8} {'max/min':>8} "
        f"{'min':>6} {'max':>6} {'sd%':>5} {'pairs':>6} {'calls':>6} {'window s':>8}"
    )
    for condition in options.condition or ["idle", "loaded"]:
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "loaded" else None
        try:
            for name in options.case or PROBLEMS:
                problem = REPO / "examples" / "kernelbench" / f"{name}.py"
                for budget in budgets:
                    runs: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
                    for _ in range(options.runs):  # the ways alternated run by run
                        for way in ways:
                            runs[way].append(one(problem, budget, way, target))
                    for way, done in runs.items():
                        speedups = [run["speedup"] for run in done]
                        logs = [math.log(value) for value in speedups]
                        pairs = sum(run["pairs"] for run in done) / len(done)
                        calls = sum(run["calls"] for run in done) / len(done)
                        window = sum(run["seconds"] for run in done) / len(done)
                        print(
                            f"{name:<14} {condition:<9} {way:<8} {budget:>8.1f} "
                            f"{max(speedups) / min(speedups):>8.3f} {min(speedups):>6.3f} "
                            f"{max(speedups):>6.3f} {100 * statistics.stdev(logs):>5.2f} "
                            f"{pairs:>6.0f} {calls:>6.0f} {window:>8.2f}",
                            flush=True,
                        )
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()


if __name__ == "__main__":
    main()
