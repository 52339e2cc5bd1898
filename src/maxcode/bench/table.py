"""The bench table: how each method did over the suite, in the field's conventions."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from maxcode.store import RunRecord, RunStore

FAST_P = (0.0, 1.0, 1.1, 1.5, 2.0)


@dataclass
class MethodRow:
    """One method's line of the table."""

    label: str
    """The method as the bench named it (``cuda-llm+maxcode``)."""
    tasks: int = 0
    """Tasks with at least one finished run."""
    mean_speedup: float = 0.0
    """PIE convention: mean over tasks of max(1, best speedup); no correct program counts 1."""
    geomean_speedup: float = 0.0
    """Geometric mean over tasks of max(1, best speedup)."""
    fast_p: dict[str, float] = field(default_factory=dict)
    """KernelBench convention: share of tasks with a correct program faster than p."""
    correct: float = 0.0
    """Share of tasks where the search found a correct program."""
    average_rank: float = 0.0
    """Mean over tasks of the method's rank among the methods (1 = best; ties share)."""
    evaluations: int = 0
    """Evaluations over all runs."""
    tokens: int = 0
    """LLM tokens over all runs."""
    cost_usd: float | None = 0.0
    """LLM cost over all runs (None when a price is unknown)."""
    unfinished: int = 0
    """Runs not done (pending, stopped, failed)."""
    void: int = 0
    """Evaluations the integrity policy voided (a cheat: never counted as correct or fast)."""
    void_reasons: dict[str, int] = field(default_factory=dict)
    """Voided evaluations per finding category (``processes``, ``isolation``, ...)."""
    isolation: list[str] = field(default_factory=list)
    """The sandbox levels its runs ran under."""
    unsafe_isolation: bool = False
    """Some run accepted a level that cannot keep expected outputs private."""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Result:
    speedup: float
    correct: bool


@dataclass(frozen=True)
class VoidRow:
    """One voided result of a bench: which run, task, method and node, and why."""

    run_id: str
    task: str
    label: str
    node: str | None
    reason: str
    """The void finding, ``"category: message"``."""
    claimed_speedup: float | None
    """What it measured before the finding took the reward."""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def bench_void(store: RunStore, bench_id: str) -> list[VoidRow]:
    """Every result of a bench's runs that the integrity policy voided, with its reason."""
    rows = []
    for run in store.bench_runs(bench_id):
        for result in store.void_results(run.run_id):
            rows.append(
                VoidRow(
                    run.run_id,
                    run.task_name,
                    run.bench_label or run.method,
                    result.node_id,
                    result.reason,
                    result.claimed_speedup,
                )
            )
    return rows


def bench_table(
    store: RunStore, bench_id: str
) -> tuple[list[MethodRow], dict[str, dict[str, float]]]:
    """The table of a bench, and per task the mean PIE speedup of each method. A result the
    integrity policy voided counts as no program at all: not correct, not fast."""
    bench = store.get_bench(bench_id)
    if bench is None:
        raise KeyError(bench_id)
    runs = store.bench_runs(bench.bench_id)
    results: dict[str, dict[str, list[_Result]]] = {label: {} for label in bench.labels}
    rows = {label: MethodRow(label) for label in bench.labels}
    for run in runs:
        label = run.bench_label or run.method
        row = rows[label]
        usage = store.usage(run.run_id)
        row.evaluations += store.count_evaluations(run.run_id)
        row.tokens += usage["prompt_tokens"] + usage["completion_tokens"]
        if row.cost_usd is not None:
            row.cost_usd = None if usage["cost_usd"] is None else row.cost_usd + usage["cost_usd"]
        level = run.isolation or str(run.config.get("isolation") or "")
        if level and level not in row.isolation:
            row.isolation.append(level)
        row.unsafe_isolation = row.unsafe_isolation or run.unsafe_isolation
        for voided in store.void_results(run.run_id):
            row.void += 1
            category = voided.reason.split(":", 1)[0].strip()
            row.void_reasons[category] = row.void_reasons.get(category, 0) + 1
        if run.status != "done":
            row.unfinished += 1
            continue
        results[label].setdefault(run.task_spec, []).append(_result(store, run))
    per_task: dict[str, dict[str, float]] = {}
    for label, by_task in results.items():
        for task, trials in by_task.items():
            per_task.setdefault(task, {})[label] = statistics.mean(
                max(1.0, trial.speedup) for trial in trials
            )
    ranks = _ranks(per_task)
    for label, row in rows.items():
        by_task = results[label]
        row.tasks = len(by_task)
        if not by_task:
            continue
        pie = [statistics.mean(max(1.0, t.speedup) for t in trials) for trials in by_task.values()]
        row.mean_speedup = statistics.mean(pie)
        row.geomean_speedup = math.exp(statistics.mean(math.log(value) for value in pie))
        row.correct = statistics.mean(
            statistics.mean(t.correct for t in trials) for trials in by_task.values()
        )
        row.fast_p = {
            f"fast_{p:g}": statistics.mean(
                statistics.mean(t.correct and t.speedup > p for t in trials)
                for trials in by_task.values()
            )
            for p in FAST_P
        }
        row.average_rank = statistics.mean(ranks[task][label] for task in by_task)
    return [rows[label] for label in bench.labels], per_task


def _result(store: RunStore, run: RunRecord) -> _Result:
    # Rewards as today's policy judges them (an older run's stored best may be a cheat's).
    rewards = store.evaluation_rewards(run.run_id)
    best = min(run.best_speedup, max([1.0, *rewards]))
    return _Result(speedup=best, correct=any(reward > 0 for reward in rewards))


def _ranks(per_task: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Rank of each method per task by speedup, 1 for the best, ties sharing the mean rank."""
    ranks: dict[str, dict[str, float]] = {}
    for task, speedups in per_task.items():
        ordered = sorted(speedups.values(), reverse=True)
        ranks[task] = {}
        for label, value in speedups.items():
            positions = [index + 1 for index, other in enumerate(ordered) if other == value]
            ranks[task][label] = statistics.mean(positions)
    return ranks
