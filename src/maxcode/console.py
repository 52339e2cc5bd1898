"""What the command line prints for a person: tables, progress lines, messages on stderr
(``--json`` output is the library's, printed as it is)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from maxcode.types import Feedback


def say(line: str) -> None:
    click.echo(line, err=True)


def isolation_text(level: str, unsafe: bool) -> str:
    text = level or "unknown"
    return text + " (unsafe, accepted with --unsafe-isolation)" if unsafe else text


def step_printer() -> Callable[[Any], None]:
    """Progress after each step, on stderr: colour on a terminal, plain lines otherwise."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False)

    def show(report: Any) -> None:
        cost = "?" if report.cost_usd is None else f"${report.cost_usd:.4f}"
        line = (
            f"step {report.step}/{report.steps}: {report.proposed} proposed, "
            f"{report.evaluations} evaluations, best {report.best_speedup:.2f}x, "
            f"{report.llm_calls} LLM calls, {report.tokens} tokens, {cost}"
        )
        if console.is_terminal:
            console.print(f"[bold]{line}[/]")
        else:
            click.echo(line, err=True)

    return show


def print_summary(summary: Any) -> None:
    """A finished search (``RunSummary``) in lines on stdout."""
    from maxcode.search.results import interval_text

    cost = "unknown" if summary.cost_usd is None else f"${summary.cost_usd:.4f}"
    message = f": {summary.message}" if summary.message else ""
    click.echo(f"run {summary.run_id} {summary.status}{message}")
    where = f"node {summary.best_node}" if summary.best_node else "the reference"
    click.echo(
        f"best speedup {summary.best_speedup:.2f}x ({where}; timed: the low end of its 95% CI)"
    )
    if summary.verified_speedup is not None and not summary.verification:
        # Nothing was judged again: no program was surely faster than the reference.
        click.echo("result: the reference (no program was surely faster; none judged again)")
    elif summary.verified_speedup is not None:
        confirmed = f"node {summary.verified_node}" if summary.verified_node else "the reference"
        interval = tuple(summary.verified_interval) if summary.verified_interval else None
        measured = interval_text(summary.verified_speedup, interval)
        click.echo(f"verified: {confirmed} at {measured} when judged again")
    click.echo(f"best program {summary.best_program}")
    click.echo(
        f"{summary.evaluations} evaluations, {summary.llm_calls} LLM calls, "
        f"{summary.prompt_tokens + summary.completion_tokens} tokens, cost {cost}"
    )
    click.echo(f"isolation {isolation_text(summary.isolation, summary.unsafe_isolation)}")
    for voided in summary.void:
        click.echo(f"void: node {voided['node']}: {voided['reason']}")


def print_bench(bench_id: str, rows: list[Any], void: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    budget = next((row.max_evals for row in rows if row.max_evals), None)
    trials = max((row.trials for row in rows), default=1)
    title = f"bench {bench_id}: {budget or '?'} evaluations per run for every method"
    if trials > 1:
        title += f"; ± is the standard deviation over {trials} trials"
    table = Table(title=title, title_justify="left")
    columns = ["method", "tasks", "mean", "unverified", "geomean", "correct"]
    columns += [
        "fast_0",
        "fast_1",
        "fast_1.1",
        "fast_1.5",
        "fast_2",
        "rank",
        "evals/run",
        "tokens",
        "cost",
        "void",
        "isolation",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "method" else "right")

    def spread(row: Any, key: str, text: str, percent: bool = False) -> str:
        value = row.spread.get(key, 0.0)
        if trials <= 1:
            return text
        return text + (f" ±{value:.0%}" if percent else f" ±{value:.2f}")

    for row in rows:
        cost = "?" if row.cost_usd is None else f"${row.cost_usd:.4f}"
        fast = [
            spread(row, "fast_" + p, f"{row.fast_p.get('fast_' + p, 0.0):.0%}", percent=True)
            for p in ("0", "1", "1.1", "1.5", "2")
        ]
        table.add_row(
            row.label, str(row.tasks),
            spread(row, "mean_speedup", f"{row.mean_speedup:.2f}x"),
            spread(row, "unverified_mean_speedup", f"{row.unverified_mean_speedup:.2f}x"),
            spread(row, "geomean_speedup", f"{row.geomean_speedup:.2f}x"),
            spread(row, "correct", f"{row.correct:.0%}", percent=True),
            *fast, f"{row.average_rank:.2f}",
            f"{row.evaluations_per_run:.1f}/{row.max_evals or '?'}",
            f"{row.tokens} ({row.cached_tokens} cached)" if row.cached_tokens else str(row.tokens),
            cost, str(row.void),
            isolation_text(", ".join(row.isolation), row.unsafe_isolation),
        )  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a pipe or a file gets the whole table, not 80 columns
    console.print(table)
    per_task = Table(title="Per task: each trial's result", title_justify="left")
    per_task.add_column("task")
    for row in rows:
        per_task.add_column(row.label)
    tasks = sorted({task for row in rows for task in row.results})
    for task in tasks:
        per_task.add_row(task, *("; ".join(row.results.get(task, [])) for row in rows))
    if tasks:
        console.print(per_task)
    for result in void:
        claimed = f" (measured {result.claimed_speedup:.2f}x)" if result.claimed_speedup else ""
        console.print(
            f"void: {result.task} {result.label} run {result.run_id} node {result.node}"
            f"{claimed}: {result.reason}",
            markup=False,
            highlight=False,
        )
    unfinished = sum(row.unfinished for row in rows)
    if unfinished:
        say(f"{unfinished} run(s) did not finish; see maxcode runs")


def print_runs(rows: list[dict[str, Any]]) -> None:
    """``maxcode runs``' table, then each void result on stderr."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    columns = ("run", "task", "method", "status", "result", "evals", "void", "calls", "cost")
    for column in (*columns, "isolation"):
        table.add_column(column)
    for row in rows:
        cost = "?" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        table.add_row(
            row["run_id"], row["task"], row["label"], _status_text(row),
            row["result_text"], str(row["evaluations"]), str(len(row["void"])),
            str(row["llm_calls"]), cost,
            isolation_text(row["isolation"], row["unsafe_isolation"]),
        )  # fmt: skip
    Console().print(table)
    for row in rows:
        if row["status"] == "damaged":
            say(f"damaged: {row['message']}")
        for voided in row["void"]:
            say(f"void: run {row['run_id']} node {voided['node']}: {voided['reason']}")


def _status_text(row: dict[str, Any]) -> str:
    """``stopped (interrupted)`` for a run Ctrl-C stopped or whose driver is gone."""
    if row["status"] == "stopped" and str(row["message"]).startswith("interrupted"):
        return "stopped (interrupted)"
    return str(row["status"])


def print_feedback(feedback: Feedback) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not feedback.compiled:
        console.print(
            f"[bold red]did not compile[/]: {feedback.error.message if feedback.error else ''}"
        )
        if feedback.compile_output:
            console.print(feedback.compile_output, markup=False)
        return
    table = Table(title=f"{feedback.task}: {feedback.summary()}", title_justify="left")
    table.add_column("test", justify="right")
    table.add_column("status")
    table.add_column("reference", justify="right")
    table.add_column("candidate", justify="right")
    table.add_column("detail", overflow="fold")
    as_text = unit(feedback.metric)
    for position, outcome in enumerate(feedback.tests):
        reference = candidate = ""
        if position < len(feedback.candidate_costs):
            reference = as_text(feedback.reference_costs[position])
            candidate = as_text(feedback.candidate_costs[position])
        colour = "green" if outcome.status == "passed" else "red"
        table.add_row(
            str(outcome.index),
            f"[{colour}]{outcome.status}[/]",
            reference,
            candidate,
            outcome.detail,
        )
    console.print(table)
    if feedback.suspect is not None:
        claimed = f" (measured {feedback.claimed_speedup:.2f}x)" if feedback.claimed_speedup else ""
        console.print(f"[bold magenta]void[/]{claimed}, no reward: {feedback.suspect}")
    elif feedback.correct and feedback.reference_cost and feedback.candidate_cost:
        low, high = feedback.speedup_interval or (feedback.speedup, feedback.speedup)
        noise = f", 95% CI {low:.2f}x-{high:.2f}x" if low != high else ""
        rounds_run = feedback.kernelbench.rounds if feedback.kernelbench else 0
        if rounds_run:
            windows = f" in {rounds_run} rounds" if rounds_run > 1 else ""
            rounds = f" over {feedback.repeats} timed calls{windows}" if noise else ""
        else:
            rounds = f" over {feedback.repeats} rounds" if noise and feedback.repeats else ""
        console.print(
            f"speedup [bold]{feedback.speedup:.2f}x[/] ({feedback.metric}: "
            f"{as_text(feedback.reference_cost)} -> "
            f"{as_text(feedback.candidate_cost)}{noise}{rounds})"
        )
        per_round = feedback.kernelbench.per_round if feedback.kernelbench else []
        if len(per_round) > 1:
            each = ", ".join(f"{done.speedup:.3f}x" for done in per_round)
            console.print(f"[dim]rounds: {each}[/]")
    for flag in feedback.flags:
        console.print(f"[yellow]flag[/]: {flag}", markup=True)
    console.print(f"[dim]isolation: {feedback.isolation}[/]")


def unit(metric: str) -> Callable[[float], str]:
    if metric == "wall":
        return lambda seconds: f"{seconds * 1000:.1f} ms"
    return lambda count: f"{count:,.0f} Ir"


REGIONS_SHOWN_FROM = 0.005
"""The table lists the regions that take at least this share of the forward."""


def print_regions(found: Any) -> None:
    """A model's regions (``maxcode.regions.Regions``) as a table on stdout, ranked."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{found.problem.name}: forward {found.forward_s * 1e3:.1f} ms")
    for column in ("#", "region", "module", "×", "share", "bound", "operators", "shapes"):
        table.add_column(
            column,
            justify="left" if column in ("region", "module", "operators", "shapes") else "right",
        )
    shown_regions = [
        region for region in found.regions if region.share >= REGIONS_SHOWN_FROM
    ] or found.regions[:1]
    for rank, region in enumerate(shown_regions, 1):
        shown = region.as_json()
        operators = ", ".join(shown["operators"][:4])
        inputs = " ".join(_shape(value) for value in shown["inputs"])
        outputs = " ".join(_shape(value) for value in shown["outputs"])
        table.add_row(
            str(rank),
            region.name,
            region.module.type,
            str(1 + len(region.alike)),
            f"{100 * region.share:.1f}%",
            "-" if region.bound is None else f"{region.bound:.2f}x",
            operators,
            f"{inputs} -> {outputs}",
        )
    Console(width=160).print(table)
    rest = found.regions[len(shown_regions) :]
    if rest:
        click.echo(
            f"{len(rest)} more regions under {REGIONS_SHOWN_FROM:.1%} each "
            f"({100 * sum(region.share for region in rest):.1f}% in all; --json lists them)"
        )
    click.echo(f"outside any region: {100 * found.outside:.1f}% of the forward")
    for rank, region in enumerate(found.regions, 1):
        if region.written is not None:
            click.echo(f"{rank}: {region.written}")


def _shape(value: dict[str, Any]) -> str:
    if "tensor" in value:
        return "x".join(str(size) for size in value["tensor"]) or "scalar"
    for sequence in ("tuple", "list"):
        if sequence in value:
            return "(" + " ".join(_shape(item) for item in value[sequence]) + ")"
    return str(value.get("value", value.get("other", "?")))


def print_model_outcome(outcome: Any) -> None:
    """``optimize --regions`` (``maxcode.regions.search.ModelOutcome``) in lines on stdout."""
    for rank, region in enumerate(outcome.outcomes, 1):
        alone = f"{region.speedup:.2f}x alone" if region.speedup is not None else "no run"
        run = f"run {region.run_id}" if region.run_id else "not searched"
        click.echo(
            f"region {rank} {region.region.name} ({100 * region.region.share:.1f}%): "
            f"{run}, {alone}; {region.why}"
        )
    model = outcome.model
    if model is None:
        click.echo("model: no region kernel was kept; the model stands as it is")
    else:
        click.echo(f"model: {model.summary()}")
        click.echo(f"predicted from the regions: {outcome.predicted:.2f}x")
        click.echo(f"stitched model {outcome.stitched}")
    click.echo(f"region problems in {outcome.folder}")
    if outcome.bench_id:
        click.echo(
            f"the regions' runs: bench {outcome.bench_id}"
            f" (maxcode report --bench {outcome.bench_id} -o report.html)"
        )
