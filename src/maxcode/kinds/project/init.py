"""``maxcode init FOLDER``: write a project task's ``task.toml`` from flags (asking for what is
missing on a terminal), then check it: the reference passes its own check and the bench runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from maxcode.errors import MaxcodeError


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_task_toml(
    name: str, editable: list[str], check: str, bench: str, build: str, metric: str
) -> str:
    """The text of a project's ``task.toml``."""
    lines = [
        f"name = {_toml_string(name)}",
        'kind = "project"',
        "editable = [" + ", ".join(_toml_string(path) for path in editable) + "]",
        f"check = {_toml_string(check)}",
        f"bench = {_toml_string(bench)}",
        f"bench_metric = {_toml_string(metric)}",
    ]
    if build:
        lines.append(f"build = {_toml_string(build)}")
    return "\n".join(lines) + "\n"


@click.command("init")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--editable", "-e", multiple=True, help="A file (or glob) maxcode may rewrite.")
@click.option("--check", "check", help="Command whose exit status 0 means correct.")
@click.option("--bench", "bench", help="Command that is timed (or prints the cost).")
@click.option("--build", "build", default="", help="Command run before check and bench.")
@click.option(
    "--metric",
    type=click.Choice(["wall", "printed", "instructions"]),
    default="wall",
    show_default=True,
    help="What the bench's cost is.",
)
@click.option("--name", help="The task's name (default: the folder's).")
@click.option("--force", is_flag=True, help="Overwrite an existing task.toml.")
@click.option("--no-check", is_flag=True, help="Write task.toml without running anything.")
def init_command(
    folder: Path,
    editable: tuple[str, ...],
    check: str | None,
    bench: str | None,
    build: str,
    metric: str,
    name: str | None,
    force: bool,
    no_check: bool,
) -> None:
    """Write FOLDER/task.toml for a project task and check it."""
    if not folder.is_dir():
        raise MaxcodeError(f"{folder}: not a folder")
    target = folder / "task.toml"
    if target.exists() and not force:
        raise MaxcodeError(f"{target} exists (--force overwrites it)")
    asking = sys.stdin.isatty()
    if not editable and asking:
        editable = tuple(click.prompt("Files maxcode may rewrite (space-separated)").split())
    if check is None and asking:
        check = click.prompt("Check command (exit 0 = correct)")
    if bench is None and asking:
        bench = click.prompt("Bench command (timed)")
    missing = [
        flag
        for flag, value in (("--editable", editable), ("--check", check), ("--bench", bench))
        if not value
    ]
    if missing:
        raise MaxcodeError(f"name {', '.join(missing)} (or run maxcode init on a terminal)")
    assert check is not None and bench is not None
    text = render_task_toml(
        name or folder.resolve().name, list(editable), check, bench, build, metric
    )
    previous = target.read_text() if target.exists() else None
    target.write_text(text)
    click.echo(f"wrote {target}", err=True)
    if no_check:
        return
    from maxcode.kinds.load import load_task_folder
    from maxcode.kinds.project.evaluate_project import evaluate_project
    from maxcode.kinds.project.spec import ProjectTask

    try:
        task = load_task_folder(folder)
        assert isinstance(task, ProjectTask)  # the task.toml just written says kind "project"
        # The reference against itself: it must build, pass its check, and the bench must run.
        verdict = evaluate_project(task, task.reference, repeats=1)
        if not verdict.correct:
            raise MaxcodeError(f"the reference failed against itself: {verdict.summary()}")
    except MaxcodeError:
        if previous is not None:
            target.write_text(previous)
        else:
            target.unlink()
        raise
    click.echo(
        f"ok: {task.name}: {len(task.project.editable)} editable "
        f"file(s); the check passes; the bench costs {verdict.reference_cost:.4g} "
        f"({verdict.metric})"
    )
