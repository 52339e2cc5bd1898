"""The ``maxcode`` command line: parse, call one library function, print.

Every option can also come from a ``MAXCODE_*`` variable. ``--json`` prints one JSON object on
stdout and nothing else; messages go to stderr. Exit codes: 0 done, 1 the job ran and failed,
2 bad usage or bad input.
"""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import click

from maxcode import __version__, console
from maxcode.errors import MaxcodeError, RunInterrupted
from maxcode.harness.settings import EvalRequest
from maxcode.options import given, setting_options, typed, with_options
from maxcode.search.config import METHODS as METHOD_NAMES
from maxcode.search.config import SearchConfig

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class _Commands(click.Group):
    """The top-level group; command groups with heavy imports load only when named."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "llm": ("maxcode.llm.commands", "llm_group"),
        "init": ("maxcode.kinds.project.init", "init_command"),
    }

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
    except sqlite3.Error as error:  # a store read outside RunStore's own error handling
        _fail(f"the run store cannot be read or written: {error}", 2)
    except Exception as error:  # a bug in maxcode: say so in one line, keep details opt-in
        if os.environ.get("MAXCODE_DEBUG"):
            raise
        _fail(f"internal error: {type(error).__name__}: {error} (MAXCODE_DEBUG=1 shows more)", 1)


@main.command("eval")
@click.argument("task")
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@with_options(setting_options(EvalRequest))
@click.pass_context
def eval_command(
    ctx: click.Context, task: str, candidate: Path, as_json: bool, **settings: Any
) -> None:
    """Check CANDIDATE against TASK's reference and measure its speedup."""
    from maxcode.api import evaluate

    named = given(ctx)
    chosen = {name: value for name, value in settings.items() if name in named}
    feedback = evaluate(task, candidate, say=console.say, **chosen)
    if as_json:
        click.echo(json.dumps(feedback.model_dump(mode="json")))
    else:
        console.print_feedback(feedback)


@main.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--clean",
    is_flag=True,
    help="First remove the scratch folders that killed runs left in the temporary folder.",
)
def doctor_command(as_json: bool, clean: bool) -> None:
    """What this machine offers each task kind, and how to install what is missing."""
    from maxcode.doctor import doctor, format_report

    if clean:
        from maxcode.harness.sandbox import remove_orphan_scratch

        removed = remove_orphan_scratch()
        console.say(f"removed {len(removed)} scratch folder(s) of processes that are gone")
    report = doctor()
    if as_json:
        click.echo(json.dumps(report.as_json()))
        return
    for line in format_report(report):
        click.echo(line)


STORE_OPTION = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar="MAXCODE_STORE",
    help="Run store (SQLite); default MAXCODE_HOME/maxcode.db.",
)

# Options that are not settings of a search, or that the commands treat apart: the method
# (optimize names one, bench several), the observation (parsed from text), the endpoint (not
# stored with a run).
_NOT_GENERATED = ("method", "observation", "base_url")


def _search_flag_names() -> tuple[str, ...]:
    """The settings the command line copies into a search's configuration."""
    from maxcode.search.config import SearchConfig

    return tuple(name for name in SearchConfig.model_fields if name not in ("observation",))


_SEARCH_OPTIONS = [
    click.option(
        "--base-url", envvar="MAXCODE_BASE_URL", help="Endpoint of an OpenAI-compatible server."
    ),
    click.option(
        "--observation",
        envvar="MAXCODE_OBSERVATION",
        help="Observation parts: feedback,trajectory,critique,best (or none).",
    ),
    click.option(
        "--maxcode",
        "maxcode_variant",
        is_flag=True,
        envvar="MAXCODE_MAXCODE",
        help="MaxCode variant: observation trajectory,critique,best.",
    ),
    *setting_options(SearchConfig, skip=_NOT_GENERATED),
    click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="MAXCODE_CONFIG",
        help="YAML file of settings, keys as the long options (options win).",
    ),
]


def search_options(function: F) -> F:
    """The search settings every command that runs searches accepts (optimize, bench)."""
    for option in reversed(_SEARCH_OPTIONS):
        function = option(function)
    return function


@main.command("optimize")
@click.argument("task", required=False)
@click.option(
    "--method",
    type=click.Choice(list(METHOD_NAMES)),
    envvar="MAXCODE_METHOD",
    help=f"Search method (default: {SearchConfig.model_fields['method'].default}).",
)
@search_options
@click.option(
    "--resume", "resume_id", help="Continue a stopped or killed run (or --regions search)."
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the best program.",
)
@click.option(
    "--regions", "regions", type=click.IntRange(min=1),
    help="TASK is a whole model: search its top N regions (maxcode regions), one run each, "
    "and judge the model with their kernels in place.",
)  # fmt: skip
@STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def optimize_command(
    ctx: click.Context,
    task: str | None,
    base_url: str | None,
    observation: str | None,
    maxcode_variant: bool,
    config_file: Path | None,
    resume_id: str | None,
    output: Path | None,
    store_path: Path | None,
    regions: int | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Search for a faster version of TASK's program.

    With --regions N, TASK is a whole model (a KernelBench-format file): its top N regions are
    searched side by side with these settings (one stored bench), each kernel surely faster
    alone is put into the model and judged there, and the model with the kernels kept is judged
    against the original; -o names the stitched model's file."""
    from maxcode.api import RESUMED_RUN_TAKES, optimize
    from maxcode.search.driver import RESUMABLE_SETTINGS, RunSummary

    on_line = typed(ctx)
    if resume_id:
        # A resumed run keeps its stored settings (isolation included): MAXCODE_* variables in
        # the environment are ignored for it, a flag on the command line is an error, and only
        # a budget or a request timeout typed on the command line changes a stored one.
        allowed = {"resume_id", "base_url", "store_path", "as_json", "output", *RESUMABLE_SETTINGS}
        if task or on_line - allowed:
            raise MaxcodeError(RESUMED_RUN_TAKES)
        settings = {name: flags[name] for name in on_line & set(RESUMABLE_SETTINGS)}
    else:
        settings = _search_settings(given(ctx), flags, config_file, observation)
    try:
        result = optimize(
            task,
            resume=resume_id,
            store=store_path,
            output=output,
            maxcode=maxcode_variant and not resume_id,
            base_url=base_url,
            regions=regions,
            on_step=console.step_printer(),
            say=console.say,
            **settings,
        )
    except RunInterrupted as stop:
        click.echo(f"interrupted; everything so far is kept: {stop.resume}", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(result.as_json()))
    elif isinstance(result, RunSummary):
        console.print_summary(result)
    else:
        console.print_model_outcome(result)


def _search_settings(
    named: set[str], flags: dict[str, Any], config_file: Path | None, observation: str | None
) -> dict[str, Any]:
    """Search settings: the YAML file's, then the flags and variables given (they win)."""
    from maxcode.search.config import load_config_file, parse_parts

    settings: dict[str, Any] = load_config_file(config_file) if config_file else {}
    for name in _search_flag_names():
        if name in named and name in flags:
            settings[name] = flags[name]
    if observation is not None:
        settings["observation"] = parse_parts(observation)
    return settings


@main.command("bench")
@click.argument("tasks", nargs=-1)
@click.option(
    "--method",
    "methods",
    multiple=True,
    help="A method to compare (repeatable); add +maxcode for its MaxCode variant.",
)
@search_options
@click.option(
    "--trials", type=click.IntRange(min=1), default=1, show_default=True,
    help="Searches per (task, method).",
)  # fmt: skip
@click.option("--resume", "resume_id", help="Continue an unfinished bench.")
@STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def bench_command(
    ctx: click.Context,
    tasks: tuple[str, ...],
    methods: tuple[str, ...],
    base_url: str | None,
    observation: str | None,
    maxcode_variant: bool,
    config_file: Path | None,
    trials: int,
    resume_id: str | None,
    store_path: Path | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Run each --method on each task of TASKS with the same budget and compare them."""
    from maxcode.api import RESUMED_BENCH_TAKES, bench
    from maxcode.search.bench.table import bench_table, bench_void
    from maxcode.store import open_store

    if resume_id:
        # Its runs keep their stored settings: any other flag would be ignored, so it is refused.
        if tasks or typed(ctx) - {"resume_id", "base_url", "store_path", "as_json"}:
            raise MaxcodeError(RESUMED_BENCH_TAKES)
        settings: dict[str, Any] = {}
    else:
        settings = _search_settings(given(ctx), flags, config_file, observation)

    def progress(summary: Any, label: str) -> None:
        console.say(
            f"run {summary.run_id} {summary.task} {label}: {summary.status}, "
            f"best {summary.best_speedup:.2f}x, {summary.evaluations} evaluations"
        )

    try:
        compared = bench(
            list(tasks),
            methods=list(methods),
            trials=trials,
            store=store_path,
            resume=resume_id,
            maxcode=maxcode_variant and not resume_id,
            on_run=progress,
            say=console.say,
            base_url=base_url,
            **settings,
        )
    except RunInterrupted as stop:
        click.echo(f"interrupted; everything so far is kept: {stop.resume}", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(compared))
        return
    store = open_store(store_path)
    rows, _ = bench_table(store, compared["bench_id"])
    console.print_bench(compared["bench_id"], rows, bench_void(store, compared["bench_id"]))


@main.command("report")
@click.argument("run_id", required=False)
@click.option("--bench", "bench_id", help="Report a bench instead of a run.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), required=True,
    help="The HTML file to write.",
)  # fmt: skip
@STORE_OPTION
def report_command(
    run_id: str | None, bench_id: str | None, output: Path, store_path: Path | None
) -> None:
    """Write a self-contained HTML report of RUN_ID (or of a bench)."""
    from maxcode.report import bench_report, run_report
    from maxcode.store import open_store

    if bool(run_id) == bool(bench_id):
        raise MaxcodeError("name either a RUN_ID or --bench BENCH_ID")
    store = open_store(store_path)
    html = bench_report(store, bench_id) if bench_id else run_report(store, run_id or "")
    try:
        output.write_text(html, encoding="utf-8")
    except OSError as error:
        raise MaxcodeError(f"cannot write {output}: {error.strerror or error}") from None
    console.say(f"wrote {output}")


@main.group("rtg")
def rtg_group() -> None:
    """Reward-to-go models: datasets from logged searches, training, ranking quality."""


@rtg_group.command("export")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--gamma", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), required=True)
@STORE_OPTION
def rtg_export_command(
    run_ids: tuple[str, ...], gamma: float, output: Path, store_path: Path | None
) -> None:
    """One row per evaluated node of RUN_IDS, labelled with its reward-to-go."""
    from maxcode.rtg import write_jsonl
    from maxcode.search.rtg_labels import export_rows
    from maxcode.store import open_store

    rows = export_rows(open_store(store_path), list(run_ids), gamma)
    write_jsonl(rows, output)
    splits = {split: sum(row["split"] == split for row in rows) for split in ("train", "test")}
    console.say(
        f"wrote {len(rows)} rows to {output} ({splits['train']} train, {splits['test']} test)"
    )


@rtg_group.command("train")
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--base", help="A Hugging Face model folder to fine-tune with LoRA.")
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True)
def rtg_train_command(data: Path, output: Path, base: str | None, epochs: int) -> None:
    """Train a reward-to-go model on DATA's train split (default: the light CPU model)."""
    from maxcode.rtg import LightModel, read_jsonl

    rows = [row for row in read_jsonl(data) if row.get("split", "train") == "train"]
    if not rows:
        raise MaxcodeError(f"{data}: no rows in the train split")
    if base:
        from maxcode.rtg.lora import train_lora

        train_lora(rows, base, output, epochs=epochs)
        console.say(f"fine-tuned {base} with LoRA on {len(rows)} rows; adapter saved to {output}")
        return
    LightModel.train(rows).save(output)
    console.say(f"trained the light model on {len(rows)} rows; saved to {output}")


@rtg_group.command("eval")
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", "model_spec", required=True, help="A model folder, or provider/model.")
@click.option("--base-url", envvar="MAXCODE_BASE_URL")
@click.option(
    "--split", type=click.Choice(["test", "train", "all"]), default="test", show_default=True
)
@click.option("--json", "as_json", is_flag=True)
def rtg_eval_command(
    data: Path, model_spec: str, base_url: str | None, split: str, as_json: bool
) -> None:
    """Ranking quality of a model on DATA (held-out tasks by default), against random."""
    import asyncio

    from maxcode.rtg import (
        load_model,
        random_baseline,
        ranking_quality,
        read_jsonl,
        score_groups,
        sibling_groups,
    )

    rows = [row for row in read_jsonl(data) if split == "all" or row.get("split") == split]
    groups = sibling_groups(rows)
    if not groups:
        raise MaxcodeError(
            f"{data}: no group of two or more sibling candidates in the {split} split"
        )
    model = load_model(model_spec, base_url=base_url)
    quality = ranking_quality(groups, asyncio.run(score_groups(groups, model.score)))
    baseline = random_baseline(groups)
    if as_json:
        click.echo(json.dumps({"model": quality, "random": baseline}))
        return
    for key in ("spearman", "top1", "ndcg"):
        click.echo(f"{key:<9} model {quality[key]:.3f}   random {baseline[key]:.3f}")
    click.echo(f"{int(quality['groups'])} groups of sibling candidates")


@main.command("runs")
@STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def runs_command(store_path: Path | None, as_json: bool) -> None:
    """List the runs in the store."""
    from maxcode.search.results import runs_json
    from maxcode.store import open_store

    rows = runs_json(open_store(store_path))
    if as_json:
        click.echo(json.dumps({"runs": rows}))
        return
    console.print_runs(rows)


@main.command("regions")
@click.argument("model", type=click.Path(path_type=Path))
@click.option(
    "--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
    help="Where the forward runs.",
)  # fmt: skip
@click.option(
    "--scale", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True,
    help="Factor for the model's sizes, hyper-parameters kept (as maxcode eval --scale).",
)  # fmt: skip
@click.option(
    "--repeats", type=click.IntRange(1), default=10, show_default=True,
    help="Timed forwards; each module's time is its median over them.",
)  # fmt: skip
@click.option(
    "--out", "out", type=click.Path(path_type=Path),
    help="Write each region as a KernelBench problem file in this folder.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def regions_command(
    model: Path, device: str, scale: float, repeats: int, out: Path | None, as_json: bool
) -> None:
    """Where MODEL's forward spends its time, in regions a kernel could replace.

    MODEL is a KernelBench-format file (Model, get_inputs, get_init_inputs). Each region is a
    module: its share of the forward, the model's bound if it cost nothing, its operators and
    shapes. With --out, each becomes a problem file maxcode eval and optimize take."""
    from maxcode.api import regions

    found = regions(model, device=device, scale=scale, repeats=repeats, out=out)
    if as_json:
        click.echo(json.dumps(found.as_json()))
        return
    console.print_regions(found)


if __name__ == "__main__":  # pragma: no cover
    run_cli()
