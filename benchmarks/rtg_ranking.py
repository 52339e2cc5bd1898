"""Ranking quality of the light reward-to-go model on logged searches over the bundled tasks.

Logs one best-of-n search per bundled C++ task through the real harness (wall metric, 1 timed
round). The proposals are the offline rules proposer's rewrites of the reference plus the
task's known fast and known wrong rewrites, so siblings differ in reward. Then, leaving one
task out at a time (no task on both sides), it trains the light model on the others and
ranks the held-out task's candidates. It prints Spearman correlation, top-1 hit rate and NDCG
against random ranking. Run:

    python benchmarks/rtg_ranking.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from maxcode.executors import LocalExecutor
from maxcode.kinds.load import load_task
from maxcode.llm import ProviderSettings, ScriptedProvider, rewrite_variants
from maxcode.rtg import (
    LightModel,
    random_baseline,
    ranking_quality,
    score_groups,
    sibling_groups,
)
from maxcode.search import Search, SearchConfig, TemplateCritic, make_method
from maxcode.search.rtg_labels import export_rows
from maxcode.store import RunStore

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
FIXTURES = REPO / "tests" / "fixtures" / "cpp"


def proposals(task_folder: Path) -> list[str]:
    reference = (task_folder / "reference.cpp").read_text()
    programs = [variant.code for variant in rewrite_variants(reference, "cpp")][:3]
    programs += [
        (FIXTURES / task_folder.name / name).read_text() for name in ("fast.cpp", "wrong.cpp")
    ]
    return [f"```cpp\n{program}\n```" for program in programs]


def log_searches(store: RunStore) -> list[str]:
    run_ids = []
    for number, folder in enumerate(sorted(path for path in EXAMPLES.iterdir() if path.is_dir())):
        task = load_task(str(folder))
        replies = proposals(folder)
        config = SearchConfig(
            model="scripted", method="best-of-n", candidates=len(replies), repeats=1
        )
        run_id = f"run{number}"
        store.create_run(
            run_id, str(folder), task.name, task.kind, config.method, config.model_dump()
        )
        policy = ScriptedProvider(
            settings=ProviderSettings(call_log=store.call_log(run_id)), replies=replies
        )
        search = Search(
            run_id=run_id, task=task, config=config, store=store, policy=policy,
            critic=TemplateCritic(), executor=LocalExecutor(), method=make_method(config),
        )  # fmt: skip
        asyncio.run(search.run())
        run_ids.append(run_id)
        print(f"logged {task.name}: {len(replies)} proposals", file=sys.stderr)
    return run_ids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    os.environ.setdefault("MAXCODE_HOME", tempfile.mkdtemp(prefix="maxcode-rtg-bench-"))
    store = RunStore(Path(os.environ["MAXCODE_HOME"]) / "rtg-bench.db")
    rows = export_rows(store, log_searches(store))
    tasks = sorted({row["task"] for row in rows})
    model_results, random_results = [], []
    for held_out in tasks:
        train = [row for row in rows if row["task"] != held_out]
        groups = sibling_groups([row for row in rows if row["task"] == held_out])
        if not groups:
            continue
        model = LightModel.train(train)
        model_results.append(
            ranking_quality(groups, asyncio.run(score_groups(groups, model.score)))
        )
        random_results.append(random_baseline(groups))
    print(f"{len(rows)} labelled candidates, {len(tasks)} tasks, leave-one-task-out")
    print(f"{'measure':<10} {'light':>8} {'random':>8}")
    for key in ("spearman", "top1", "ndcg"):
        ours = statistics.mean(result[key] for result in model_results)
        chance = statistics.mean(result[key] for result in random_results)
        print(f"{key:<10} {ours:>8.3f} {chance:>8.3f}")


if __name__ == "__main__":
    main()
