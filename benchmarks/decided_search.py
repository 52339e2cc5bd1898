"""What timing to the decision buys a search, and whether it buys wrong winners.

The same scripted search runs on each task twice in a row: a scripted model (no network)
answers with the same six candidates every time, the task's reference slowed by a busy loop of
three sizes, its fast and its wrong rewrite (``tests/fixtures/cpp``) and the fast one slowed;
once with screens that stop when a candidate is clearly below the best so far
(``Method.bar``, the default) and once with every screen timed to the full precision (the bar
switched off). It prints per task and way: seconds per search evaluation (the search's
wall time over its evaluations; the final re-verification is off, as it is a run's fixed
cost), the evaluations, the timed rounds they took, and the final best (node and reward).
The last column says whether both ways keep the same final best program: the speed must not
buy a different winner.

    python benchmarks/decided_search.py                         # the default tasks
    python benchmarks/decided_search.py --task io_bound_sum --method effi-learner --depth 3
    python benchmarks/decided_search.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TASKS = ("io_bound_sum", "needless_copies", "pair_count_quadratic")
FIXTURES = REPO / "tests" / "fixtures" / "cpp"


def _spun(source: str, iterations: int) -> str:
    """``source`` with a busy loop of ``iterations`` at the start of ``main``."""
    brace = source.index("{", source.index("int main("))
    spin = (
        "\n    volatile long long spin = 0;\n"
        f"    for (long long i = 0; i < {iterations}LL; ++i) spin = spin + i;\n"
    )
    return source[: brace + 1] + spin + source[brace + 1 :]


def _candidates(task: str) -> list[str]:
    """The six answers, in the order the model gives them."""
    reference = (REPO / "examples" / "cpp" / task / "reference.cpp").read_text()
    fast = (FIXTURES / task / "fast.cpp").read_text()
    wrong = (FIXTURES / task / "wrong.cpp").read_text()
    programs = [
        _spun(reference, 30_000_000),
        fast,
        wrong,
        _spun(reference, 10_000_000),
        _spun(fast, 30_000_000),
        _spun(reference, 3_000_000),
    ]
    return [f"```cpp\n{program}```" for program in programs]


def _search(
    task: str, method: str, depth: int, candidates: int, full: bool, folder: Path | None = None
) -> dict[str, Any]:
    """One search on ``task`` (its folder ``folder``, else the bundled example); ``full``:
    every screen timed to the full precision."""
    from maxcode.llm import register_provider
    from maxcode.llm._scripted import ScriptedProvider
    from maxcode.search import methods
    from maxcode.search.api import new_run, run_search
    from maxcode.search.config import SearchConfig
    from maxcode.store import open_store

    answers = _candidates(task)
    register_provider(
        "fixed",
        lambda model, settings, **_: ScriptedProvider(
            model, settings, replies=answers, cycle=True, provider_name="fixed"
        ),
    )

    keepers = (methods.BestOfN, methods.EffiLearner, methods.CudaLLM)
    for keeper in keepers:
        keeper.bar = staticmethod(methods.no_bar if full else methods.best_so_far)  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as home:
        os.environ["MAXCODE_HOME"] = home
        store_path = Path(home) / "runs.db"
        store = open_store(store_path)
        config = SearchConfig(
            method=method,
            depth=depth,
            candidates=candidates,
            model="fixed/six",
            critic_model="rules",
            profile=False,
            verify=False,
        )
        where = folder or REPO / "examples" / "cpp" / task
        run_id = new_run(store, str(where), config)
        began = time.perf_counter()
        summary = run_search(store, run_id)
        wall_s = time.perf_counter() - began
        with sqlite3.connect(store_path) as connection:
            rows = connection.execute(
                "SELECT seconds, feedback_json FROM evaluations WHERE run_id = ?", (run_id,)
            ).fetchall()
    seconds = [row[0] for row in rows]
    verdicts = [json.loads(row[1]) for row in rows]
    rounds = [verdict.get("repeats", 0) for verdict in verdicts]
    return {
        "task": task,
        "way": "full" if full else "decided",
        "evaluations": len(rows),
        # The search's wall time over its evaluations: the store's seconds of an evaluation
        # count its wait for the executor's slot too.
        "seconds_per_evaluation": wall_s / max(len(rows), 1),
        "rounds": sum(rounds),
        "best_node": summary.best_node,
        "best_reward": summary.best_speedup,
        "verified": summary.verified_speedup,
        "each": [
            {
                "seconds": round(took, 2),
                "rounds": verdict.get("repeats", 0),
                "correct": verdict["correct"],
                "speedup": round(verdict["speedup"], 3),
            }
            for took, verdict in zip(seconds, verdicts)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", help="examples/cpp task (repeatable)")
    parser.add_argument(
        "--size",
        type=int,
        help="instead, pair_count_quadratic with nine tests of this many numbers "
        "(eval_seconds.py's task: 8000 makes the reference about 150 ms)",
    )
    parser.add_argument("--method", default="cuda-llm")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    options = parser.parse_args()
    rows: list[dict[str, Any]] = []
    scratch = tempfile.TemporaryDirectory(prefix="maxcode-decided-")
    folder = None
    if options.size:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from eval_seconds import _task

        folder = _task(Path(scratch.name), options.size)
    for task in ["pair_count_quadratic"] if folder else options.task or TASKS:
        pair = [
            _search(task, options.method, options.depth, options.candidates, full, folder)
            for full in (False, True)
        ]
        same = pair[0]["best_node"] == pair[1]["best_node"]
        for row in pair:
            row["same_best"] = same
        rows += pair
    if options.json:
        print(json.dumps({"rows": rows}))
        return
    print(f"{'task':<22} {'way':<8} {'evals':>5} {'s/eval':>7} {'rounds':>6} {'best':>6} "
          f"{'reward':>7} {'same best':>9}")  # fmt: skip
    for row in rows:
        print(
            f"{row['task']:<22} {row['way']:<8} {row['evaluations']:>5} "
            f"{row['seconds_per_evaluation']:>7.2f} {row['rounds']:>6} "
            f"{row['best_node'] or 'ref':>6} {row['best_reward']:>7.2f} "
            f"{'yes' if row['same_best'] else 'NO':>9}"
        )
    decided = [row for row in rows if row["way"] == "decided"]
    full = [row for row in rows if row["way"] == "full"]
    ratio = sum(r["seconds_per_evaluation"] for r in decided) / max(
        sum(r["seconds_per_evaluation"] for r in full), 1e-9
    )
    print(f"seconds per evaluation, decided / full: {ratio:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
