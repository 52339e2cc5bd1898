"""What a KernelBench evaluation costs on this machine, old way and new way side by side.

Three figures, each measured both ways in this one run (on the CPU, through the real harness):

- **build**: a new C++ extension candidate (``tests/fixtures/kernelbench/<problem>/cpu.py``,
  which includes ``torch/extension.h`` as a model's candidates do, made new with a comment) is
  built by ``prebuild_task``, without (``MAXCODE_HEADER_CACHE=0``) and with torch's precompiled
  header (``kinds.kernelbench.headers``), that header built first and its seconds printed once;
- **reported**: ``maxcode eval``'s number for the identical candidate (``class
  ModelNew(Model): pass``): ``rounds.REPORTED_ROUNDS`` fixed rounds (the least the old rule
  took; it added more while they scattered, up to 24) against rounds
  until the interval is within ``rounds.REPORTED_PRECISION``; its seconds, rounds, speedup;
- **search**: an offline search (``--model rules``, two steps) of the problem as a user runs it,
  its seconds and evaluations (the new way only: its proposer builds no extension);
- **beside**: two reported evaluations of identical candidates (``BESIDE``) started together
  in two processes, both timing on the last CPU: each round waiting for the CPU's turn before
  its workers start (``MAXCODE_TURN=start``) against rounds that start up and check on another
  CPU while the other's timed window runs; the pair's seconds and the scores.

Each row gives the medians over ``--trials`` and the ratio old/new. Run it on an idle machine.

    python benchmarks/kernelbench_speed.py [--problem 2_SumReduction] [--trials 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from maxcode.kinds import evaluate_task, prebuild_task
from maxcode.kinds.kernelbench import rounds
from maxcode.kinds.kernelbench.headers import include_folder
from maxcode.kinds.load import load_task

REPO = Path(__file__).resolve().parent.parent
MAXCODE = (sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()")
T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def with_headers(on: bool) -> dict[str, str]:
    """The environment's header setting for one way (off: ``0``; on: the default folder)."""
    if on:
        os.environ.pop("MAXCODE_HEADER_CACHE", None)
    else:
        os.environ["MAXCODE_HEADER_CACHE"] = "0"
    return dict(os.environ)


def row(name: str, old: list[float], new: list[float], unit: str, note: str = "") -> None:
    before, after = statistics.median(old), statistics.median(new)
    ratio = before / after if after else float("nan")
    print(f"{name:<34} {before:>9.2f} {after:>9.2f} {ratio:>7.2f}x  {unit} {note}".rstrip())


def builds(problem: str, trials: int) -> None:
    task = load_task(str(REPO / "examples" / "kernelbench" / f"{problem}.py"))
    fixture = REPO / "tests" / "fixtures" / "kernelbench" / problem / "cpu.py"
    source = fixture.read_text()

    def fresh() -> str:
        return f"{source}\n# {secrets.token_hex(8)}\n"

    with_headers(True)
    header_s, folder = timed(lambda: include_folder(source))
    print(f"torch's header for this candidate's flags: {header_s:.1f} s (once; {folder})")
    old: list[float] = []
    new: list[float] = []
    for _ in range(trials):
        for on, kept in ((False, old), (True, new)):
            with_headers(on)
            seconds, failed = timed(lambda: prebuild_task(task, fresh(), device="cpu"))
            if failed is not None:
                raise SystemExit(f"the build failed: {failed}")
            kept.append(seconds)
    row("build of a new C++ candidate", old, new, "s")


def reported(problem: str, trials: int) -> None:
    task = load_task(str(REPO / "examples" / "kernelbench" / f"{problem}.py"))
    identical = task.reference + "\n\nclass ModelNew(Model):\n    pass\n"
    evaluate_task(task, identical, rounds=1)  # the roofline, caches: not measured
    ways: dict[str, tuple[list[float], list[int], list[float]]] = {
        "old": ([], [], []),
        "new": ([], [], []),
    }
    for _ in range(trials):
        for way, count in (("old", rounds.REPORTED_ROUNDS), ("new", None)):
            seconds, feedback = timed(
                functools.partial(evaluate_task, task, identical, rounds=count, reported=True)
            )
            walls, taken, speedups = ways[way]
            walls.append(seconds)
            taken.append(feedback.kernelbench.rounds if feedback.kernelbench else 0)
            speedups.append(feedback.speedup)
    for way, (_, taken, speedups) in ways.items():
        print(
            f"  {way}: rounds {min(taken)}-{max(taken)}, identical candidate's speedups "
            f"{min(speedups):.3f}-{max(speedups):.3f}"
        )
    row(
        "reported eval, identical candidate",
        ways["old"][0],
        ways["new"][0],
        "s",
        f"({rounds.REPORTED_ROUNDS} rounds vs within +-{rounds.REPORTED_PRECISION:.0%})",
    )


def searches(problem: str, trials: int) -> None:
    """The offline search as a user runs it (a fresh interpreter, a fresh store): its proposer
    writes no extension (``torch.inference_mode``, ``torch.compile``), so this is the screens'
    and the re-verification's cost, the new way only."""
    walls: list[float] = []
    evaluations: list[int] = []
    with_headers(True)
    for _ in range(trials):
        with tempfile.TemporaryDirectory() as scratch:
            command = [
                *MAXCODE, "optimize", str(REPO / "examples" / "kernelbench" / f"{problem}.py"),
                "--model", "rules", "--depth", "2", "--device", "cpu",
                "--store", str(Path(scratch) / "runs.db"), "--json",
            ]  # fmt: skip
            run = functools.partial(subprocess.run, command, capture_output=True, text=True)
            seconds, done = timed(run)
        if done.returncode != 0:
            raise SystemExit(f"the search failed: {done.stderr.strip()[-500:]}")
        walls.append(seconds)
        evaluations.append(int(json.loads(done.stdout)["evaluations"]))
    print(
        f"{'offline search (rules, 2 steps)':<34} {'':>9} {statistics.median(walls):>9.2f}"
        f" {'':>8}  s ({min(evaluations)}-{max(evaluations)} evaluations and the"
        " re-verification)"
    )


BESIDE = ("4_Softmax", "2_SumReduction")
"""The two problems evaluated at once by ``beside``."""


def beside(trials: int) -> None:
    """Two reported evaluations of identical candidates started together in two processes (as
    two searches on one machine), both timing on the last CPU: rounds one after another (old:
    ``MAXCODE_TURN=start``, each round waits for the CPU's turn before its workers start)
    against rounds whose start-up and checks run on another CPU while the other times
    (new). The pair's seconds, and what the identical candidates scored."""
    with tempfile.TemporaryDirectory() as scratch:
        pairs = []
        for name in BESIDE:
            task = REPO / "examples" / "kernelbench" / f"{name}.py"
            candidate = Path(scratch) / f"{name}.py"
            candidate.write_text(task.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
            pairs.append([*MAXCODE, "eval", str(task), str(candidate), "--json"])
        ways = {"old": {"MAXCODE_TURN": "start"}, "new": {}}
        walls: dict[str, list[float]] = {way: [] for way in ways}
        scores: dict[str, list[str]] = {way: [] for way in ways}
        for _ in range(trials):
            for way, setting in ways.items():
                environment = {**os.environ, **setting}
                started = time.perf_counter()
                running = [
                    subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
                    for command in pairs
                ]
                outputs = [process.communicate()[0] for process in running]
                walls[way].append(time.perf_counter() - started)
                for output in outputs:
                    result = json.loads(output)
                    details = result.get("kernelbench") or {}
                    scores[way].append(
                        f"{result['speedup']:.3f} ({details.get('rounds', result.get('rounds'))}"
                        " rounds"
                        + (f", void: {result['suspect']}" if result.get("suspect") else "")
                        + ")"
                    )
        for way in ways:
            print(f"  {way}: identical candidates scored {', '.join(scores[way])}")
        row(
            "two reported evals at once",
            walls["old"],
            walls["new"],
            "s",
            f"({' and '.join(BESIDE)}, the pair's wall time)",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="2_SumReduction")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--only", choices=["build", "reported", "search", "beside"])
    options = parser.parse_args()
    print(f"{'figure':<34} {'old':>9} {'new':>9} {'ratio':>8}")
    if options.only in (None, "build"):
        builds(options.problem, options.trials)
    if options.only in (None, "reported"):
        reported(options.problem, options.trials)
    if options.only in (None, "search"):
        searches(options.problem, options.trials)
    if options.only in (None, "beside"):
        beside(options.trials)


if __name__ == "__main__":
    main()
