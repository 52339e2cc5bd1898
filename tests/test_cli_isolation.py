"""The isolation opt-in on the command line: a level that cannot keep expected outputs private
is refused (one line, exit 2) unless ``--unsafe-isolation`` accepts it, and the choice is kept
with the run and shown in every result."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import EXAMPLES, run_maxcode, run_optimize

TASK = EXAMPLES / "io_bound_sum"
REFUSED = "isolation 'rlimits' cannot keep expected outputs private"


def _one_error_line(stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "--unsafe-isolation" in lines[0]


def test_eval_optimize_and_bench_refuse_rlimits_without_the_opt_in(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    done = run_maxcode("eval", str(TASK), str(TASK / "reference.cpp"), "--isolation", "rlimits")
    assert done.returncode == 2 and REFUSED in done.stderr
    _one_error_line(done.stderr)
    done = run_optimize(str(TASK), "--isolation", "rlimits", "--store", str(store))
    assert done.returncode == 2 and REFUSED in done.stderr
    _one_error_line(done.stderr)
    done = run_maxcode(
        "bench", str(TASK), "--method", "best-of-n", "--store", str(store),
        "--isolation", "rlimits",
    )  # fmt: skip
    assert done.returncode == 2 and REFUSED in done.stderr
    # Nothing was recorded for a refused run.
    listed = json.loads(run_maxcode("runs", "--store", str(store), "--json").stdout)
    assert listed["runs"] == []


def test_the_opt_in_is_stored_shown_and_kept_on_resume(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    done = run_optimize(
        str(TASK), "--isolation", "rlimits", "--unsafe-isolation", "--depth", "1",
        "--candidates", "1", "--repeats", "1", "--no-verify", "--store", str(store), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--unsafe-isolation" in done.stderr  # the warning says what was accepted
    result = json.loads(done.stdout)
    assert result["isolation"] == "rlimits" and result["unsafe_isolation"] is True
    (listed,) = json.loads(run_maxcode("runs", "--store", str(store), "--json").stdout)["runs"]
    assert listed["isolation"] == "rlimits" and listed["unsafe_isolation"] is True
    assert listed["void"] == []

    # A resume keeps the stored choice: a flag is refused, a variable is ignored.
    run_id = result["run_id"]
    again = run_optimize("--resume", run_id, "--isolation", "bwrap", "--store", str(store))
    assert again.returncode == 2 and "--resume takes only" in again.stderr
    again = run_optimize(
        "--resume", result["run_id"], "--store", str(store), "--json",
        env={"MAXCODE_ISOLATION": "bwrap"},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert resumed["isolation"] == "rlimits" and resumed["unsafe_isolation"] is True

    report = tmp_path / "report.html"
    done = run_maxcode("report", result["run_id"], "--store", str(store), "-o", str(report))
    assert done.returncode == 0, done.stderr
    html = report.read_text()
    assert "isolation <b>rlimits</b>" in html and "accepted with --unsafe-isolation" in html


def test_auto_is_resolved_and_stored_with_the_run(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    doctor = json.loads(run_maxcode("doctor", "--json").stdout)
    done = run_optimize(
        str(TASK), "--depth", "1", "--candidates", "1", "--repeats", "1", "--no-verify",
        "--store", str(store), "--json",
    )  # fmt: skip
    if not doctor["isolation"]["safe"]:
        assert done.returncode == 2 and "--unsafe-isolation" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["isolation"] == doctor["isolation"]["level"]
    assert result["unsafe_isolation"] is False


def test_the_command_lines_choices_are_the_configs() -> None:
    from typing import get_args

    import click

    from maxcode.cli import main
    from maxcode.harness.sandbox import ISOLATION_CHOICES, Isolation
    from maxcode.search.config import SearchConfig

    # One definition: the levels, "auto" before them, and every place that lists them.
    assert ("auto", *get_args(Isolation)) == ISOLATION_CHOICES
    annotation = SearchConfig.model_fields["isolation"].annotation
    assert get_args(annotation) == ISOLATION_CHOICES
    assert isinstance(main, click.Group)
    for name in ("eval", "optimize", "bench"):
        command = main.commands[name]
        (option,) = [p for p in command.params if p.name == "isolation"]
        assert isinstance(option.type, click.Choice)
        assert tuple(option.type.choices) == ISOLATION_CHOICES, name
