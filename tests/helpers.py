"""Helpers shared by tests: writing small tasks, a hermetic home, running the real ``maxcode``
command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
FIXTURES = REPO / "tests" / "fixtures" / "cpp"

ECHO_SUM = """#include <cstdio>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    printf("%lld\\n", a + b);
}
"""


def write_task(
    folder: Path,
    reference: str = ECHO_SUM,
    tests: list[tuple[str, str]] | None = None,
    toml: str = 'name = "sum"\nkind = "cpp"\n',
) -> Path:
    """A task folder with the given reference and (input, output) tests."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(toml)
    (folder / "reference.cpp").write_text(reference)
    (folder / "tests").mkdir(exist_ok=True)
    for index, (given, expected) in enumerate(tests or [("1 2\n", "3\n"), ("40 2\n", "42\n")]):
        (folder / "tests" / f"input.{index}.txt").write_text(given)
        (folder / "tests" / f"output.{index}.txt").write_text(expected)
    return folder


def make_hermetic(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """Point all maxcode state at ``home`` and drop the user's other ``MAXCODE_*`` settings
    (undone with ``monkeypatch``): what every test runs with, and what a module-scoped
    fixture sets up for itself with ``pytest.MonkeyPatch.context()``."""
    monkeypatch.setenv("MAXCODE_HOME", str(home))
    for name in list(os.environ):
        if (
            name.startswith("MAXCODE_")
            and name != "MAXCODE_HOME"
            and not name.startswith("MAXCODE_TEST_")
        ):
            monkeypatch.delenv(name)
    # The same adaptive timing as a user's, with a smaller cap on its seconds: no test asserts
    # a speedup that needs a narrow interval, and the suite has a budget (with 0.5 s it took
    # 885-1034 s on fresh clones; with 0.25 s, 915-964 s on a slower day of the same host).
    monkeypatch.setenv("MAXCODE_TIMING_BUDGET_S", "0.25")
    return home


def processes_with(fragment: str) -> list[str]:
    """Pids of live (not zombie) processes whose command line contains ``fragment``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ")
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if fragment.encode() in cmdline and state != "Z":
            found.append(entry)
    return found


def run_maxcode(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed command line as a user would, in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def eval_json(*args: str) -> dict[str, Any]:
    """``maxcode eval --json``: stdout must be exactly one JSON object."""
    done = run_maxcode("eval", *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_optimize(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``maxcode optimize ARGS`` in a fresh interpreter, with a dummy OpenAI key (the fake
    server on loopback takes any)."""
    return subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "optimize", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OPENAI_API_KEY": "sk-test", **(env or {})},
        check=False,
    )


def write_problem(folder: Path, forward: str, inputs: str = "[torch.randn(32, 64)]") -> Path:
    """A KernelBench problem of one input whose ``Model.forward(x)`` is ``forward``."""
    path = folder / "problem.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, x):\n        {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return path
