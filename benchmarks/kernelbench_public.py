"""The public KernelBench problems, each against itself: does every problem run at ``--scale``,
and does an identical candidate score 1.0?

Given a checkout of ScalingIntelligence/KernelBench (the folder holding ``level1``,
``level2``...; its files stay outside this repository), it evaluates for each problem of the
chosen levels the problem's own ``Model`` as the candidate (the problem file with
``class ModelNew(Model): pass`` appended) through ``maxcode eval --json`` as a user would, and
prints per problem: whether it ran (or the one-line error), whether it was correct, the
speedup with its interval, and the evaluation's wall time; then a summary: how many ran, how
many identical candidates scored within 0.95-1.05, and which did not.

    python benchmarks/kernelbench_public.py KERNELBENCH_DIR [--levels 1,2] [--scale 0.1]
        [--jobs 1] [--limit N] [--only level1/42,level2/1] [--jsonl rows.jsonl]
        [--passes 2] [--rounds 4] [--device cuda]

``--passes`` repeats the whole list. ``--rounds`` is
``maxcode eval``'s: rounds of fresh worker pairs per evaluation (default: eval's own, what a
reported speedup takes).

Timings need an otherwise idle machine; ``--jobs`` above 1 runs evaluations side by side
(quicker for "does it run", noisier speedups).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from maxcode.kinds.kernelbench.problem import kernelbench_suite

BAND = (0.95, 1.05)
"""An identical candidate's speedup should fall in here."""
EVAL_TIMEOUT_S = 1800


@dataclass
class Row:
    """One problem's evaluation."""

    problem: str
    """``level<N>/<file stem>``."""
    ran: bool
    """The evaluation finished with a result (the problem runs at this scale)."""
    correct: bool = False
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    seconds: float = 0.0
    """Wall time of the whole ``maxcode eval``."""
    error: str = ""
    """Why it did not run, or why the identical candidate was not correct (one line)."""
    suspect: str = ""
    """The void integrity finding that took the reward (the speedup is then 0)."""
    claimed: float | None = None
    """The speedup measured before a void finding took it."""
    per_round: list[dict[str, object]] = field(default_factory=list)
    """Each round as ``maxcode eval --json`` gives it (``per_round``: its speedup, interval
    and the two sides' median calls), in the jsonl: a miss can be read without re-running it."""
    reference_ms: float | None = None
    """The reference's median timed call, in milliseconds (for KernelBench's baseline times)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per phase of the evaluation (``phases`` of ``maxcode eval --json``)."""


def identical_candidate(problem: Path) -> str:
    return problem.read_text(encoding="utf-8") + "\n\nclass ModelNew(Model):\n    pass\n"


def evaluate(
    problem: Path,
    name: str,
    scale: float,
    compile_baseline: bool,
    rounds: int | None = None,
    device: str = "cpu",
) -> Row:
    with tempfile.TemporaryDirectory(prefix="maxcode-kbpublic-") as folder:
        candidate = Path(folder) / "candidate.py"
        candidate.write_text(identical_candidate(problem), encoding="utf-8")
        command = [
            sys.executable,
            "-c",
            "from maxcode.cli import run_cli; run_cli()",
            "eval",
            str(problem),
            str(candidate),
            "--json",
            "--scale",
            str(scale),
            "--compile-baseline" if compile_baseline else "--no-compile-baseline",
            *(["--rounds", str(rounds)] if rounds else []),
            "--device",
            device,
        ]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=EVAL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Row(name, False, seconds=EVAL_TIMEOUT_S, error=f"over {EVAL_TIMEOUT_S} s")
        seconds = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout.strip():
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        error = lines[-1] if lines else "no output"
        return Row(name, False, seconds=seconds, error=error)
    result = json.loads(done.stdout)
    failure = result.get("error") or {}
    interval = result.get("speedup_interval")
    speedup = result.get("speedup")
    reference = (result.get("timings") or {}).get("reference") or {}
    return Row(
        name,
        True,
        correct=bool(result.get("correct")),
        speedup=float(speedup) if speedup is not None else None,
        interval=(float(interval[0]), float(interval[1])) if interval else None,
        seconds=seconds,
        error=str(failure.get("message", "")).splitlines()[0] if failure else "",
        suspect=str(result.get("suspect") or ""),
        claimed=result.get("claimed_speedup"),
        per_round=list(result.get("per_round") or []),
        reference_ms=reference["median_s"] * 1e3 if "median_s" in reference else None,
        phases={str(k): float(v) for k, v in (result.get("phases") or {}).items()},
    )


def selectors(name: str) -> set[str]:
    """What ``--only`` may name a problem (``level1/42_Foo``) by: its name or its id
    (``level1/42``)."""
    return {name, name.split("_")[0]}


def chosen_problems(
    root: Path, levels: list[int], limit: int | None, only: set[str]
) -> Iterator[tuple[Path, str]]:
    for level in levels:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"{folder}: not a folder (give the KernelBench checkout's root)")
        problems = kernelbench_suite(folder)
        if only:
            problems = [path for path in problems if selectors(f"level{level}/{path.stem}") & only]
        for path in problems[:limit] if limit else problems:
            yield path, f"level{level}/{path.stem}"


def print_row(row: Row) -> None:
    label = row.problem[:44]
    if not row.ran:
        print(f"{label:<44} {'no':>4} {'':>7} {'':>17} {row.seconds:6.1f}  {row.error}")
        return
    speedup = f"{row.speedup:.3f}" if row.speedup is not None else "-"
    interval = f"{row.interval[0]:.3f}-{row.interval[1]:.3f}" if row.interval else ""
    tail = "" if row.correct else f"  wrong: {row.error}"
    if row.reference_ms is not None:
        tail += f"  reference {row.reference_ms:.4g} ms"
    if row.phases:
        tail += "  " + " ".join(f"{k} {v:.1f}" for k, v in row.phases.items() if v >= 0.05)
    if row.suspect:
        tail += f"  void (claimed {row.claimed or 0:.3f}): {row.suspect}"
    print(
        f"{label:<44} {'yes':>4} {speedup:>7} {interval:>17} {row.seconds:6.1f}{tail}",
        flush=True,
    )


def summary(rows: list[Row], scale: float) -> None:
    ran = [row for row in rows if row.ran]
    correct = [row for row in ran if row.correct and row.speedup is not None]
    void = [row for row in correct if row.suspect]
    inside = [row for row in correct if BAND[0] <= (row.speedup or 0) <= BAND[1]]
    print()
    print(
        f"at scale {scale:g}: {len(ran)} of {len(rows)} problems ran; {len(correct)} correct, "
        f"{len(void)} of them void (an integrity finding took the speedup)"
    )
    if correct:
        speedups = [row.speedup or 0.0 for row in correct]
        print(
            f"identical candidate within {BAND[0]}-{BAND[1]}: {len(inside)} of {len(correct)}; "
            f"speedups min {min(speedups):.3f}, median {statistics.median(speedups):.3f}, "
            f"max {max(speedups):.3f}"
        )
        logs = [math.log(max(value, 1e-12)) for value in speedups]
        held = [
            row for row in correct if row.interval and row.interval[0] <= 1.0 <= row.interval[1]
        ]
        rms = math.sqrt(statistics.fmean(x * x for x in logs))
        print(
            f"root mean square of the log speedup {rms:.4f}; "
            f"intervals containing 1.0: {len(held)} of {len(correct)}"
        )
        seconds = [row.seconds for row in rows]
        print(
            f"evaluation wall time: median {statistics.median(seconds):.1f} s, "
            f"max {max(seconds):.1f} s, total {sum(seconds):.0f} s"
        )
    for row in rows:
        if not row.ran:
            print(f"  did not run: {row.problem}: {row.error}")
        elif not row.correct:
            print(f"  not correct: {row.problem}: {row.error}")
        elif row.suspect:
            print(f"  void: {row.problem}: claimed {row.claimed or 0:.3f}: {row.suspect}")
        elif row not in inside:
            print(f"  outside the band: {row.problem}: {row.speedup:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the KernelBench checkout (holds level1, ...)")
    parser.add_argument("--levels", default="1,2", help="comma-separated levels (default 1,2)")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=1, help="evaluations run side by side")
    parser.add_argument("--limit", type=int, default=None, help="first N problems per level")
    parser.add_argument("--only", default="", help="e.g. level1/42,level2/1 (ids or stems)")
    parser.add_argument("--compile-baseline", action="store_true", help="also time torch.compile")
    parser.add_argument("--jsonl", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--passes", type=int, default=1, help="times the whole list is run")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (maxcode eval --device)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="maxcode eval --rounds (default: eval's)"
    )
    options = parser.parse_args()
    levels = [int(level) for level in options.levels.split(",") if level.strip()]
    only = {item.strip() for item in options.only.split(",") if item.strip()}
    problems = list(chosen_problems(options.root, levels, options.limit, only))
    found = {selector for _, name in problems for selector in selectors(name)}
    if only - found:
        raise SystemExit(
            f"--only: no such problem in --levels {options.levels}: "
            + ", ".join(sorted(only - found))
        )
    runs = [(path, name) for _ in range(max(1, options.passes)) for path, name in problems]
    print(f"{'problem':<44} {'ran':>4} {'speedup':>7} {'95% interval':>17} {'eval s':>6}")
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        futures = [
            pool.submit(
                evaluate,
                path,
                name,
                options.scale,
                options.compile_baseline,
                options.rounds,
                options.device,
            )
            for path, name in runs
        ]
        rows = []
        # Each row is written as it comes: a pass stopped early (a session's end, a pass of
        # 80 minutes) keeps the rows it ran.
        jsonl = options.jsonl.open("w", encoding="utf-8") if options.jsonl else None
        with jsonl or contextlib.nullcontext():
            for future in futures:
                rows.append(future.result())
                print_row(rows[-1])
                if jsonl is not None:
                    jsonl.write(json.dumps(asdict(rows[-1])) + "\n")
                    jsonl.flush()
    summary(rows, options.scale)


if __name__ == "__main__":
    main()
