"""The bundled CUDA and Triton fixtures on a GPU: how long a CUDA candidate takes to build, and
what each fixture's kernel scores, through the harness (sandboxed build step and evaluation).

Builds (``--builds``), each into an empty cache, through ``prebuild_task``:

- one after another, for the time one new candidate waits: ``1_ScaledGELU/cuda.py`` (its CUDA
  source includes torch's headers, as most generated candidates do) and ``cuda_light.py`` (the
  kernel and a launcher on plain pointers, built without torch's headers: worker
  ``_light_cuda_builds``);
- then every other problem's ``cuda.py`` at once, for what the machine's cores do for a search
  that builds several candidates while others are timed.

Evaluations (``--evaluate``): each CUDA fixture (from the cache just built) and each Triton
fixture, one round, at the bundled shapes; prints eager, candidate and harness-floor times.

    python benchmarks/gpu_fixtures.py --builds --evaluate --json fixtures.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "kernelbench"
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"


def _build(problem: str, fixture: str) -> dict[str, Any]:
    from maxcode.kinds import prebuild_task
    from maxcode.kinds.load import load_task

    bundled = EXAMPLES / f"{problem}.py"
    task = load_task(str(bundled if bundled.is_file() else FIXTURES / problem / "problem.py"))
    source = (FIXTURES / problem / f"{fixture}.py").read_text()
    started = time.perf_counter()
    failed = prebuild_task(task, source, device="cuda")
    seconds = time.perf_counter() - started
    error = None if failed is None else (failed.error.message if failed.error else "failed")
    print(f"build {problem}/{fixture}: {seconds:.1f} s{'' if error is None else ' ' + error}")
    sys.stdout.flush()
    return {"problem": problem, "fixture": fixture, "seconds": seconds, "error": error}


def builds(only: list[str]) -> dict[str, Any]:
    if only:
        return {"alone": [_build(problem, "cuda") for problem in only]}
    alone = [_build("1_ScaledGELU", "cuda"), _build("1_ScaledGELU", "cuda_light")]
    others = sorted(path.parent.name for path in FIXTURES.glob("*/cuda.py"))
    others = [name for name in others if name != "1_ScaledGELU"]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(others) or 1) as pool:
        together = list(pool.map(lambda name: _build(name, "cuda"), others))
    wall = time.perf_counter() - started
    print(f"{len(others)} builds at once: {wall:.1f} s wall")
    return {"alone": alone, "together": together, "together_wall_s": wall}


def _evaluate(problem: str, fixture: Path, backend: str) -> dict[str, Any]:
    from maxcode.kinds import evaluate_task
    from maxcode.kinds.load import load_task

    bundled = EXAMPLES / f"{problem}.py"
    task = load_task(str(bundled if bundled.is_file() else FIXTURES / problem / "problem.py"))
    started = time.perf_counter()
    feedback = evaluate_task(task, fixture.read_text(), device="cuda", backend=backend)
    seconds = time.perf_counter() - started
    measured = feedback.kernelbench.timings if feedback.kernelbench else {}
    timings = {name: stats.median_s for name, stats in measured.items()}
    row = {
        "problem": problem,
        "fixture": fixture.name,
        "backend": backend,
        "correct": feedback.correct,
        "speedup": feedback.speedup,
        "interval": feedback.speedup_interval,
        "timings_ms": {name: value * 1e3 for name, value in timings.items()},
        "flags": feedback.flags,
        "error": feedback.error.message if feedback.error else None,
        "seconds": seconds,
    }
    ms = " ".join(f"{name} {value * 1e3:.4f}" for name, value in timings.items())
    print(
        f"{backend:>6} {problem}/{fixture.name}: correct={feedback.correct} "
        f"speedup {feedback.speedup:.3f} ({ms} ms) {seconds:.0f} s "
        f"{row['error'] or ''} {'; '.join(feedback.flags)[:300]}"
    )
    sys.stdout.flush()
    return row


def evaluations(backends: list[str], only: list[str]) -> list[dict[str, Any]]:
    fixtures = []
    if "cuda" in backends:
        fixtures += [(path.parent.name, path, "cuda") for path in FIXTURES.glob("*/cuda*.py")]
        # Ten times the work on a side stream: its speedup shows whether that work is timed.
        fixtures.append(("cheats", FIXTURES / "cheats" / "side_stream.py", "cuda"))
    if "triton" in backends:
        fixtures += [(path.stem, path, "triton") for path in FIXTURES.glob("triton/[0-9]*.py")]
    return [
        _evaluate(problem, path, backend)
        for problem, path, backend in sorted(fixtures)
        if not only or problem in only
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", action="store_true", help="time the builds")
    parser.add_argument("--evaluate", action="store_true", help="evaluate every fixture")
    parser.add_argument("--backends", default="cuda,triton", help="the fixtures evaluated")
    parser.add_argument("--only", action="append", default=[], help="these problems alone")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if args.builds:
        results["builds"] = builds(args.only)
    if args.evaluate:
        results["evaluations"] = evaluations(args.backends.split(","), args.only)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
