"""The parent's memory and time for KernelBench problems whose outputs are large.

A held-out ReLU over an N x N float32 input (N = 10,000: 400 MB out; N = 16,384: 1.07 GB),
the candidate identical to the reference, evaluated in-process as ``maxcode eval`` does (one
round unless told), each size in a process of its own so that its peak memory is its own:

    python benchmarks/large_outputs.py --size 10000 --size 16384 [--rounds 1]
    python benchmarks/large_outputs.py --size 10000 --against 3da4aa0

Prints per size: correct, speedup and interval, the parent's peak resident memory (VmHWM:
mapped windows of the workers' output files included), the seconds of the checks phase and of
the whole evaluation, and the machine's least free memory while it ran. ``--against REV`` runs
the same sizes on a git revision's source (a worktree in a temporary folder) beside this one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parent.parent

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


N = {size}


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
"""


class Measured(TypedDict, total=False):
    """One size's evaluation, as ``--one`` prints it (JSON); only ``size`` and ``error`` when it
    failed to run."""

    size: int
    correct: bool
    speedup: float | None
    interval: Sequence[float] | None
    """The speedup's 95% interval, [low, high]."""
    error: str | None
    flags: list[str]
    checks_s: float | None
    total_s: float
    parent_peak_mb: int
    least_free_mb: int


def _kb(path: str, key: str) -> int:
    """A ``key: N kB`` line of a /proc file."""
    with open(path, encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _peak_kb() -> int:
    return _kb("/proc/self/status", "VmHWM")


def _available_kb() -> int:
    return _kb("/proc/meminfo", "MemAvailable")


def one(size: int, rounds: int) -> Measured:
    """One evaluation in this process (``--one``)."""
    from maxcode.api import evaluate

    least = [_available_kb()]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            least[0] = min(least[0], _available_kb())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with tempfile.TemporaryDirectory(prefix="maxcode-large-") as folder:
        problem = Path(folder, f"1_ReLU{size}.py")
        problem.write_text(PROBLEM.format(size=size))
        candidate = Path(folder, "candidate.py")
        candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
        started = time.perf_counter()
        try:
            feedback = evaluate(str(problem), candidate, device="cpu", rounds=rounds)
        except Exception as error:  # the old harness refuses large outputs
            done.set()
            return {"size": size, "error": f"{type(error).__name__}: {error}"[:300]}
        seconds = time.perf_counter() - started
    done.set()
    return {
        "size": size,
        "correct": feedback.correct,
        "speedup": feedback.speedup,
        "interval": feedback.speedup_interval,
        "error": feedback.error.message if feedback.error else None,
        "flags": feedback.flags,
        "checks_s": feedback.phases.get("checks"),
        "total_s": round(seconds, 1),
        "parent_peak_mb": _peak_kb() // 1024,
        "least_free_mb": least[0] // 1024,
    }


def measure(size: int, rounds: int, source: Path) -> Measured:
    environment = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(size), "--rounds", str(rounds)],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"size": size, "error": (done.stderr.strip().splitlines() or ["died"])[-1]}
    return json.loads(lines[-1])


def _line(label: str, row: Measured) -> str:
    if row.get("error") and "correct" not in row:
        return f"{label:>10} N={row['size']}: {row['error']}"
    interval = row.get("interval") or [0.0, 0.0]
    return (
        f"{label:>10} N={row['size']}: correct={row['correct']} speedup={row['speedup']:.3f} "
        f"[{interval[0]:.3f}, {interval[1]:.3f}] parent peak {row['parent_peak_mb']} MB, "
        f"checks {row['checks_s']} s, all {row['total_s']} s, least free "
        f"{row['least_free_mb']} MB, flags {row['flags']} {row['error'] or ''}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", help="a git revision to measure beside the working tree")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        print(json.dumps(one(arguments.one, arguments.rounds)))
        return 0
    sizes = arguments.size or [10000]
    sources = [("this", ROOT / "src")]
    worktree = None
    if arguments.against:
        worktree = Path(tempfile.mkdtemp(prefix="maxcode-against-"))
        subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "worktree",
                "add",
                "--detach",
                str(worktree),
                arguments.against,
            ],
            check=True,
            capture_output=True,
        )
        sources.append((arguments.against[:10], worktree / "src"))
    try:
        for size in sizes:
            for label, source in sources:
                print(_line(label, measure(size, arguments.rounds, source)), flush=True)
    finally:
        if worktree is not None:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                check=False,
                capture_output=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
