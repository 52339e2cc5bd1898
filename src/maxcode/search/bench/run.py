"""Running a bench: every method on every task with the same number of evaluations, all kept
in the store.

The budget is ``--max-evals`` (default: candidates x depth, what ``cuda-llm`` spends). Every
method's search stops at it; best-of-n draws that many samples, and the methods that refine
get steps enough to spend it (the loop stops at the limit, so extra steps cost nothing when
every step evaluates something new)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from maxcode.errors import MaxcodeError, TaskError
from maxcode.executors import make_executor
from maxcode.kinds.load import load_task
from maxcode.search.config import METHODS, SearchConfig, make_config, maxcode_variant
from maxcode.search.driver import RunSummary, resolve_isolation, run_search, run_search_async
from maxcode.store import RunRecord, RunStore

MAXCODE_SUFFIX = "+maxcode"


def evaluation_budget(settings: dict[str, Any]) -> int:
    """The evaluations every method of a bench gets: ``max_evals``, else candidates x depth."""
    defaults = SearchConfig.model_validate({})
    given = settings.get("max_evals")
    if given:
        return int(given)
    return int(settings.get("candidates") or defaults.candidates) * int(
        settings.get("depth") or defaults.depth
    )


def label_config(label: str, settings: dict[str, Any], budget: int | None = None) -> SearchConfig:
    """The configuration of one method label: a method, or a method with ``+maxcode``; with a
    ``budget``, set so that the method can spend exactly that many evaluations."""
    method = label.removesuffix(MAXCODE_SUFFIX)
    if method not in METHODS:
        raise MaxcodeError(
            f"unknown method {label!r} (one of {', '.join(METHODS)}, optionally with +maxcode)"
        )
    merged = {**settings, "method": method}
    if label.endswith(MAXCODE_SUFFIX):  # the label decides, whatever observation was given
        merged = maxcode_variant({**merged, "observation": None})
    if budget is not None:
        merged["max_evals"] = budget
        if method == "best-of-n":
            merged["candidates"] = budget
        else:
            merged["depth"] = max(int(merged.get("depth") or 1), budget)
    return make_config(merged)


def new_bench(
    store: RunStore,
    tasks: list[str],
    labels: list[str],
    settings: dict[str, Any],
    trials: int,
    extra: dict[str, Any] | None = None,
) -> str:
    """Record a bench and one pending run per (task, method, trial); returns the bench id.
    ``extra`` is stored with the bench's settings (``regions``: a whole model's search)."""
    if not labels:
        raise MaxcodeError("name at least one --method")
    if len(set(labels)) != len(labels):
        raise MaxcodeError("each --method may be named once")
    # The level is resolved (and a refused one raised) once, before any task is loaded; every
    # run of the bench stores it, so a resumed bench keeps it.
    settings = {**settings, "isolation": resolve_isolation(make_config(settings)).isolation}
    budget = evaluation_budget(settings)
    settings = {**settings, "max_evals": budget}
    configs = {label: label_config(label, settings, budget) for label in labels}
    loaded = {
        spec: load_task(spec, settings.get("pie_tests"), settings.get("scale") or 1.0)
        for spec in tasks
    }
    bench_id = uuid.uuid4().hex[:12]
    shared = {key: value for key, value in settings.items() if key != "base_url"}
    shared.update(extra or {})
    store.create_bench(bench_id, shared, tasks, labels, trials)
    for spec in tasks:
        task = loaded[spec]
        for label in labels:
            config = configs[label]
            for trial in range(trials):
                store.create_run(
                    uuid.uuid4().hex[:12], spec, task.name, task.kind, config.method,
                    config.model_dump(exclude={"base_url"}), status="pending",
                    bench_id=bench_id, bench_label=label, bench_trial=trial,
                )  # fmt: skip
    return bench_id


def run_bench(
    store: RunStore,
    bench_id: str,
    *,
    base_url: str | None = None,
    on_run: Callable[[RunSummary, str], None] = lambda summary, label: None,
) -> None:
    """Run every unfinished run of a bench (a resumed bench continues): one after the other,
    or ``--concurrency`` at once sharing one executor (its ``--workers`` evaluation slots).

    A task that cannot be evaluated (its reference fails its tests) fails its runs and the
    bench goes on; a model that cannot be reached stops the bench: the next run would fail
    the same way.
    """
    bench = store.get_bench(bench_id)
    if bench is None:
        raise MaxcodeError(f"no bench {bench_id!r} in {store.path}")
    unfinished = [run for run in store.bench_runs(bench.bench_id) if run.status != "done"]
    concurrency = int(bench.config.get("concurrency") or 1)
    if concurrency > 1 and len(unfinished) > 1:
        asyncio.run(_run_parallel(store, unfinished, bench.config, base_url, on_run, concurrency))
        return
    for run in unfinished:
        try:
            summary = run_search(store, run.run_id, base_url=base_url)
        except TaskError:
            continue
        on_run(summary, run.bench_label or summary.method)


async def _run_parallel(
    store: RunStore,
    runs: list[RunRecord],
    settings: dict[str, Any],
    base_url: str | None,
    on_run: Callable[[RunSummary, str], None],
    concurrency: int,
) -> None:
    """Several searches at once, sharing one executor (local or Ray); the store stays here.
    Their evaluations together take at most ``--workers`` slots (on Ray: the cluster's), so
    while one search waits for its model, another's candidates run."""
    workers = int(settings.get("workers") or 1)
    executor = make_executor(
        str(settings.get("executor") or "local"), workers, ray_address=settings.get("ray_address")
    )
    slots = asyncio.Semaphore(concurrency)

    async def one(run: RunRecord) -> None:
        async with slots:
            try:
                summary = await run_search_async(
                    store, run.run_id, base_url=base_url, executor=executor
                )
            except TaskError:
                return
            on_run(summary, run.bench_label or summary.method)

    async with executor:
        tasks = [asyncio.ensure_future(one(run)) for run in runs]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            # One search failing for the model (unreachable, bad key) ends them all.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
