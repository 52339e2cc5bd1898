"""Search settings are stated once, in ``SearchConfig``: the command's options, their
``MAXCODE_*`` variables, YAML keys and help defaults all come from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from maxcode.cli import main
from maxcode.search.config import SearchConfig, load_config_file
from tests.helpers import run_maxcode, write_task


def _options(command: str) -> dict[str, click.Option]:
    ctx = click.Context(main)
    found = main.get_command(ctx, command)
    assert found is not None
    return {
        param.name: param
        for param in found.params
        if isinstance(param, click.Option) and param.name
    }


def test_every_setting_has_an_option_a_variable_and_its_default_in_the_help() -> None:
    for command in ("optimize", "bench"):
        options = _options(command)
        for name, field in SearchConfig.model_fields.items():
            if name == "method" and command == "bench":
                continue  # bench names several methods
            assert name in options, (command, name)
            option = options[name]
            assert option.envvar == "MAXCODE_" + name.upper()
            if field.default is not None and not isinstance(field.default, (bool, list)):
                assert f"(default: {field.default})" in (option.help or ""), name
    assert "patience" in _options("optimize") and "target" in _options("bench")


def test_yaml_keys_are_the_setting_names(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("patience: 3\ntarget: 2.5\ntrajectory-tokens: 100\n")
    settings = load_config_file(config)
    assert SearchConfig.model_validate(settings).patience == 3


def test_early_stopping_over_the_command_line(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    done = run_maxcode(
        "optimize", str(task), "--method", "effi-learner", "--depth", "6", "--patience", "1",
        "--metric", "instructions", "--store", str(tmp_path / "r.db"), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "done"
    if len(result["trace"]) < 6:
        assert "stopped early" in result["message"] and "--patience 1" in result["message"]


def test_python_dash_m_runs_the_same_command_line(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_task"
    done = subprocess.run(
        [sys.executable, "-m", "maxcode", "eval", str(missing), str(missing)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: task not found: {missing}"
