"""The ``maxcode`` command line: parse, call one library function, print.

Every option can also come from a ``MAXCODE_*`` variable. ``--json`` prints one JSON object on
stdout and nothing else; messages go to stderr. Exit codes: 0 done, 1 the job ran and failed,
2 bad usage or bad input.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import click

from maxcode import __version__
from maxcode.errors import MaxcodeError
from maxcode.types import Feedback

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class _Commands(click.Group):
    """The top-level group; command groups with heavy imports load only when named."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {"llm": ("maxcode.llm.cli", "llm_group")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attribute = self.lazy[name]
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="maxcode")
def main() -> None:
    """maxcode: make programs faster by LLM search guided by execution feedback."""


def run_cli() -> None:
    """Entry point: one line and an exit code for every known failure, never a traceback."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except MaxcodeError as error:
        _fail(str(error), error.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as error:  # a bug in maxcode: say so in one line, keep details opt-in
        if os.environ.get("MAXCODE_DEBUG"):
            raise
        _fail(f"internal error: {type(error).__name__}: {error} (MAXCODE_DEBUG=1 shows more)", 1)


@main.command("eval")
@click.argument("task")
@click.argument("candidate", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--metric",
    type=click.Choice(["wall", "instructions"]),
    default="wall",
    show_default=True,
    envvar="MAXCODE_METRIC",
    help="wall: median wall time; instructions: callgrind count (deterministic).",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    envvar="MAXCODE_DEVICE",
    help="Where the candidate runs (C++ tasks: cpu).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    envvar="MAXCODE_REPEATS",
    help="Timed runs per test (wall metric); default from the task (5).",
)
@click.option(
    "--pie-tests",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="MAXCODE_PIE_TESTS",
    help="Test-case folder for a PIE row (FILE.jsonl#N).",
)
@click.option(
    "--isolation",
    type=click.Choice(["auto", "bwrap", "unshare", "rlimits"]),
    default="auto",
    show_default=True,
    envvar="MAXCODE_ISOLATION",
    help="Sandbox for candidates; auto picks the strongest available.",
)
def eval_command(
    task: str,
    candidate: Path,
    as_json: bool,
    metric: str,
    device: str,
    repeats: int | None,
    pie_tests: Path | None,
    isolation: str,
) -> None:
    """Check CANDIDATE against TASK's reference and measure its speedup."""
    from maxcode.evaluate import evaluate

    feedback = evaluate(
        task,
        candidate,
        metric=metric,
        device=device,
        repeats=repeats,
        pie_tests=pie_tests,
        isolation=isolation,
    )
    if as_json:
        click.echo(json.dumps(feedback.model_dump(mode="json")))
    else:
        _print_feedback(feedback)


def _print_feedback(feedback: Feedback) -> None:
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
    unit = _unit(feedback.metric)
    for position, outcome in enumerate(feedback.tests):
        reference = candidate = ""
        if position < len(feedback.candidate_costs):
            reference = unit(feedback.reference_costs[position])
            candidate = unit(feedback.candidate_costs[position])
        colour = "green" if outcome.status == "passed" else "red"
        table.add_row(
            str(outcome.index),
            f"[{colour}]{outcome.status}[/]",
            reference,
            candidate,
            outcome.detail,
        )
    console.print(table)
    if feedback.correct and feedback.reference_cost and feedback.candidate_cost:
        console.print(
            f"speedup [bold]{feedback.speedup:.2f}x[/] ({feedback.metric}: "
            f"{unit(feedback.reference_cost)} -> {unit(feedback.candidate_cost)})"
        )
    for flag in feedback.flags:
        console.print(f"[yellow]flag[/]: {flag}", markup=True)
    console.print(f"[dim]isolation: {feedback.isolation}[/]")


def _unit(metric: str) -> Callable[[float], str]:
    if metric == "wall":
        return lambda seconds: f"{seconds * 1000:.1f} ms"
    return lambda count: f"{count:,.0f} Ir"


if __name__ == "__main__":  # pragma: no cover
    run_cli()
