"""Self-contained HTML reports of a run and of a bench (inline CSS and SVG; works offline)."""

from __future__ import annotations

import difflib
from functools import cache

import jinja2

from maxcode.errors import MaxcodeError
from maxcode.report.svg import Series, TreeNode, line_chart, tree_chart
from maxcode.search.bench.table import FAST_P, bench_table, bench_void
from maxcode.search.observation import attempt_summary, describe_feedback
from maxcode.search.results import (
    evaluation_rewards,
    interval_text,
    method_label,
    run_isolation,
    run_result,
)
from maxcode.search.tree import Node, best_node, load_tree
from maxcode.store import RunStore


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("maxcode.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def run_report(store: RunStore, run_id: str) -> str:
    """The HTML report of one run."""
    record = store.get_run(run_id)
    if record is None:
        raise MaxcodeError(f"no run {run_id!r} in {store.path}")
    nodes = load_tree(store, record.run_id)
    # The best as today's integrity policy judges the tree (an older run may have stored a
    # result that is now void as its best).
    best: Node | None = best_node(nodes)
    if best is not None and best.is_root:
        best = None
    rewards = evaluation_rewards(store, record.run_id)
    by_step = line_chart(
        "Best speedup after each step",
        "step",
        "best speedup",
        [Series("best", [(0.0, 1.0)] + [(i + 1.0, v) for i, v in enumerate(record.trace)])],
    )
    by_evaluation = line_chart(
        "Best speedup against evaluations",
        "evaluations",
        "best speedup",
        [Series("best", _running_best(rewards))],
    )
    tree = tree_chart(
        "Search tree (colour: status, size: speedup)",
        [
            TreeNode(
                node.node_id,
                node.parent.node_id if node.parent else None,
                node.depth,
                node.status,
                node.reward,
                f"{node.node_id}: void: {node.suspect}"
                if node.suspect
                else f"{node.node_id}: {node.status}, {node.reward:.2f}x",
            )
            for node in nodes
        ],
    )
    diff: list[tuple[str, str]] = []
    if best is not None and best.source is not None:
        diff = _diff(nodes[0].source or "", best.source)
    summaries = {node.node_id: attempt_summary(node) for node in nodes}
    speedups = {
        node.node_id: interval_text(
            node.speedup, node.feedback.speedup_interval if node.feedback else None
        )
        for node in nodes
    }
    result = run_result(store, record)
    return (
        _environment()
        .get_template("run.html.j2")
        .render(
            title=f"maxcode run {record.run_id}",
            run=record,
            label=method_label(record),
            best_speedup=best.reward if best is not None else 1.0,
            result=result,
            result_text=interval_text(result.speedup, result.interval),
            speedups=speedups,
            observation=",".join(record.config.get("observation") or []),
            evaluations=len(rewards),
            usage=store.usage(record.run_id),
            by_step=by_step,
            by_evaluation=by_evaluation,
            tree=tree,
            best=best,
            best_feedback=describe_feedback(best.feedback) if best else "",
            diff=diff,
            attempts=nodes[1:],
            summaries=summaries,
            isolation=run_isolation(record),
            void=store.void_results(record.run_id),
        )
    )


def bench_report(store: RunStore, bench_id: str) -> str:
    """The HTML report of a bench: the table and speedup-against-budget curves."""
    bench = store.get_bench(bench_id)
    if bench is None:
        raise MaxcodeError(f"no bench {bench_id!r} in {store.path}")
    rows, per_task = bench_table(store, bench.bench_id)
    void = bench_void(store, bench.bench_id)
    curves: dict[str, list[list[float]]] = {label: [] for label in bench.labels}
    for run in store.bench_runs(bench.bench_id):
        if run.status == "done":
            points = _running_best(evaluation_rewards(store, run.run_id))
            curves[method_label(run)].append([y for _, y in points])
    series = [Series(label, _mean_curve(runs)) for label, runs in curves.items() if runs]
    chart = line_chart(
        "Mean best speedup (PIE convention) against evaluations per task",
        "evaluations",
        "mean best speedup",
        series,
    )
    return (
        _environment()
        .get_template("bench.html.j2")
        .render(
            title=f"maxcode bench {bench.bench_id}",
            bench=bench,
            rows=rows,
            per_task=per_task,
            fast_p=[f"{p:g}" for p in FAST_P],
            curves=chart,
            void=void,
            model=(bench.config.get("regions") or {}).get("outcome"),
            regions_pending=(bench.config.get("regions") or {}).get("model"),
        )
    )


def _running_best(rewards: list[float]) -> list[tuple[float, float]]:
    best, points = 1.0, [(0.0, 1.0)]
    for count, reward in enumerate(rewards, start=1):
        best = max(best, reward)
        points.append((float(count), best))
    return points


def _mean_curve(runs: list[list[float]]) -> list[tuple[float, float]]:
    """Mean over runs of the best speedup within each budget (a run that stopped keeps its
    final best)."""
    length = max(len(run) for run in runs)
    padded = [run + [run[-1]] * (length - len(run)) for run in runs]
    return [(float(index), sum(column) / len(column)) for index, column in enumerate(zip(*padded))]


def _diff(reference: str, best: str) -> list[tuple[str, str]]:
    lines = difflib.unified_diff(
        reference.splitlines(), best.splitlines(), "reference", "best", lineterm="", n=3
    )
    kinds = []
    for line in lines:
        kind = "ctx"
        if line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+") and not line.startswith("+++"):
            kind = "add"
        elif line.startswith("-") and not line.startswith("---"):
            kind = "del"
        kinds.append((kind, line))
    return kinds
