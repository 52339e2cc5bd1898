"""Every script in ``benchmarks/`` answers ``--help`` at once: exit 0, a usage text, and no work
started (nothing written to its ``MAXCODE_HOME``, its temporary folder or its working folder).

The scripts' numbers are theirs to print (``docs/development.md#benchmarks``); this only keeps
them runnable after the package moves. They run side by side, each in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted([*BENCHMARKS.glob("*.py"), *BENCHMARKS.glob("*.sh")])
HELP_TIMEOUT_S = 60
QUICK_S = 30
"""Longer than an answer to ``--help`` takes (an import of torch, about 1 s idle), shorter than
any script's work."""


@dataclass(frozen=True)
class HelpAnswer:
    """What one script did when asked for ``--help``."""

    returncode: int
    """Its exit status; -1 when it ran past ``HELP_TIMEOUT_S``."""
    output: str
    """Its stdout and stderr, one after the other."""
    seconds: float
    """Wall time from start to exit."""
    written: list[str]
    """What it left in its ``MAXCODE_HOME``, temporary and working folders (should be none)."""


def ask_for_help(script: Path, scratch: Path) -> HelpAnswer:
    """Run ``script --help`` with its own empty home, temporary and working folders."""
    folders = {name: scratch / name for name in ("home", "tmp", "cwd")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("MAXCODE_")}
    env.update(MAXCODE_HOME=str(folders["home"]), TMPDIR=str(folders["tmp"]))
    interpreter = ["bash"] if script.suffix == ".sh" else [sys.executable]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [*interpreter, str(script), "--help"],
            cwd=folders["cwd"],
            env=env,
            capture_output=True,
            text=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, output = -1, str(expired.stdout or "") + str(expired.stderr or "")
    seconds = time.perf_counter() - started
    written = sorted(
        str(path.relative_to(scratch)) for folder in folders.values() for path in folder.iterdir()
    )
    return HelpAnswer(returncode, output, seconds, written)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HelpAnswer]:
    """Every script's answer, asked side by side (one file: one xdist worker asks them all)."""
    root = tmp_path_factory.mktemp("benchmarks-help")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {
            script.name: pool.submit(ask_for_help, script, root / script.stem) for script in SCRIPTS
        }
        return {name: future.result() for name, future in futures.items()}


def test_the_benchmarks_folder_holds_scripts() -> None:
    assert any(script.suffix == ".py" for script in SCRIPTS)
    assert any(script.suffix == ".sh" for script in SCRIPTS)


@pytest.mark.parametrize("name", [script.name for script in SCRIPTS])
def test_a_benchmark_answers_help_without_starting_its_work(
    name: str, answers: dict[str, HelpAnswer]
) -> None:
    answer = answers[name]
    assert answer.returncode == 0, answer.output[-2000:]
    assert "usage" in answer.output.lower(), answer.output[-2000:]
    assert answer.written == [], f"{name} --help wrote {answer.written}"
    assert answer.seconds < QUICK_S, f"{name} --help took {answer.seconds:.1f} s"
