"""The bench table: how each method did over the suite, in the field's conventions."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from maxcode.search.results import run_isolation, run_result
from maxcode.store import RunStore

FAST_P = (0.0, 1.0, 1.1, 1.5, 2.0)


@dataclass
class MethodRow:
    """One method's line of the table."""

    label: str
    """The method as the bench named it (``cuda-llm+maxcode``)."""
    tasks: int = 0
    """Tasks with at least one finished run."""
    mean_speedup: float = 0.0
    """PIE convention: mean over tasks of max(1, verified speedup); no correct program counts 1
    (a run whose best failed re-verification counts what re-verification confirmed)."""
    unverified_mean_speedup: float = 0.0
    """The same mean over the unverified best speedups the searches measured."""
    geomean_speedup: float = 0.0
    """Geometric mean over tasks of max(1, verified speedup)."""
    fast_p: dict[str, float] = field(default_factory=dict)
    """KernelBench convention: share of tasks with a correct program faster than p."""
    correct: float = 0.0
    """Share of tasks where the search found a correct program."""
    average_rank: float = 0.0
    """Mean over tasks of the method's rank among the methods (1 = best; ties share)."""
    evaluations: int = 0
    """Evaluations over all runs."""
    evaluations_per_run: float = 0.0
    """Mean evaluations of a finished run (every method gets the same budget)."""
    max_evals: int | None = None
    """The evaluation budget each run of the method had (``--max-evals``)."""
    trials: int = 0
    """Trials over which the spread is taken."""
    spread: dict[str, float] = field(default_factory=dict)
    """Per column (``mean_speedup``, ``geomean_speedup``, ``correct``, ``fast_<p>``): the
    sample standard deviation of that column computed on each trial alone (0 for one trial)."""
    tokens: int = 0
    """LLM tokens over all runs."""
    cached_tokens: int = 0
    """Of ``tokens``, prompt tokens a provider's prompt cache served (billed at its cached
    price: the saving of ``--prompt-cache``)."""
    cost_usd: float | None = 0.0
    """LLM cost over all runs (None when a price is unknown)."""
    unfinished: int = 0
    """Runs not done (pending, stopped, failed)."""
    void: int = 0
    """Evaluations the integrity policy voided (a cheat: never counted as correct or fast)."""
    void_reasons: dict[str, int] = field(default_factory=dict)
    """Voided evaluations per finding category (``processes``, ``isolation``, ...)."""
    results: dict[str, list[str]] = field(default_factory=dict)
    """Per task, each finished trial's result as reported: the speedup with its 95% interval
    (``1.23x (95% CI 1.20-1.26)``), marked unverified when it was not re-verified."""
    isolation: list[str] = field(default_factory=list)
    """The sandbox levels its runs ran under."""
    unsafe_isolation: bool = False
    """Some run accepted a level that cannot keep expected outputs private."""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Result:
    speedup: float
    unverified: float
    correct: bool
    trial: int


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
    finished: dict[str, list[int]] = {label: [] for label in bench.labels}
    for run in runs:
        label = run.bench_label or run.method
        row = rows[label]
        usage = store.usage(run.run_id)
        evaluations = store.count_evaluations(run.run_id)
        row.evaluations += evaluations
        row.max_evals = run.config.get("max_evals") or row.max_evals
        row.tokens += usage["prompt_tokens"] + usage["completion_tokens"]
        row.cached_tokens += usage["cached_prompt_tokens"]
        if row.cost_usd is not None:
            row.cost_usd = None if usage["cost_usd"] is None else row.cost_usd + usage["cost_usd"]
        level = run_isolation(run)
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
        finished[label].append(evaluations)
        result = run_result(store, run)
        row.results.setdefault(run.task_spec, []).append(result.text())
        results[label].setdefault(run.task_spec, []).append(
            _Result(result.speedup, result.unverified, result.correct, run.bench_trial or 0)
        )
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
        if finished[label]:
            row.evaluations_per_run = statistics.mean(finished[label])
        if not by_task:
            continue
        columns = _columns(by_task)
        row.mean_speedup = columns["mean_speedup"]
        row.unverified_mean_speedup = columns["unverified_mean_speedup"]
        row.geomean_speedup = columns["geomean_speedup"]
        row.correct = columns["correct"]
        row.fast_p = {key: value for key, value in columns.items() if key.startswith("fast_")}
        row.average_rank = statistics.mean(ranks[task][label] for task in by_task)
        trial_numbers = sorted({t.trial for trials in by_task.values() for t in trials})
        row.trials = len(trial_numbers)
        per_trial = [
            _columns(
                {
                    task: [t for t in trials if t.trial == number]
                    for task, trials in by_task.items()
                    if any(t.trial == number for t in trials)
                }
            )
            for number in trial_numbers
        ]
        row.spread = {
            key: statistics.stdev(values[key] for values in per_trial)
            if len(per_trial) > 1
            else 0.0
            for key in columns
        }
    return [rows[label] for label in bench.labels], per_task


def _columns(by_task: dict[str, list[_Result]]) -> dict[str, float]:
    """The table's columns over tasks (each task: the mean over its trials)."""
    pie = [statistics.mean(max(1.0, t.speedup) for t in trials) for trials in by_task.values()]
    unverified = [
        statistics.mean(max(1.0, t.unverified) for t in trials) for trials in by_task.values()
    ]
    columns = {
        "mean_speedup": statistics.mean(pie),
        "unverified_mean_speedup": statistics.mean(unverified),
        "geomean_speedup": math.exp(statistics.mean(math.log(value) for value in pie)),
        "correct": statistics.mean(
            statistics.mean(t.correct for t in trials) for trials in by_task.values()
        ),
    }
    for p in FAST_P:
        columns[f"fast_{p:g}"] = statistics.mean(
            statistics.mean(t.correct and t.speedup > p for t in trials)
            for trials in by_task.values()
        )
    return columns


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


def bench_json(store: RunStore, bench_id: str) -> dict[str, Any]:
    """A bench as ``maxcode bench --json`` prints it: its tasks, a row per method, each task's
    results, the isolation its runs had and every void result."""
    bench = store.get_bench(bench_id)
    if bench is None:
        raise KeyError(bench_id)
    rows, per_task = bench_table(store, bench.bench_id)
    return {
        "bench_id": bench.bench_id,
        "tasks": bench.tasks,
        "methods": [row.as_json() for row in rows],
        "per_task": per_task,
        "isolation": sorted({level for row in rows for level in row.isolation}),
        "unsafe_isolation": any(row.unsafe_isolation for row in rows),
        "void": [result.as_json() for result in bench_void(store, bench.bench_id)],
    }
