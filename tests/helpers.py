"""Helpers shared by tests: writing small tasks, a hermetic home, running the real ``maxcode``
command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from maxcode.harness.sandbox import scratch_base

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


SUITE_ROUNDS = 3
"""The rounds of every reported KernelBench evaluation in the suite (``MAXCODE_MOST_ROUNDS``,
set by ``make_hermetic``): the fewest in which a round can be set aside (``rounds.set_aside``).
The default, 8 and up to 24 while rounds scatter (on a loaded 2-core machine they always do),
is for a number a user reads; no test asserts a speedup that needs it, and the rounds cost:
a search's test took 59 s with up to 24, 31 s with 8, 27 s with 3 (2026-12-02). The tests
that rounds are added and capped set the variable themselves."""


SUITE_HEADERS = Path(tempfile.gettempdir()) / f"maxcode-suite-headers-{os.getuid()}"
"""Where the suite keeps torch's precompiled headers (``MAXCODE_HEADER_CACHE``), from one run to
the next."""


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
    # a speedup that needs a narrow interval, and the suite has a budget (in one process, with
    # 0.5 s it took 885-1034 s on fresh clones; with 0.25 s, 915-964 s on a slower day).
    monkeypatch.setenv("MAXCODE_TIMING_BUDGET_S", "0.25")
    # And a reported KernelBench evaluation takes ``SUITE_ROUNDS`` rounds (below).
    monkeypatch.setenv("MAXCODE_MOST_ROUNDS", str(SUITE_ROUNDS))
    # Torch's precompiled headers (``kinds.kernelbench.headers``, about 0.8 GB and a minute
    # each) built once for the whole suite, every worker and test alike, not once per home.
    monkeypatch.setenv("MAXCODE_HEADER_CACHE", str(SUITE_HEADERS))
    # A search with a model profiles every correct candidate by default (callgrind for C++:
    # an offline search of io_bound_sum took 17.6 s with it, 8.9 s without, 2026-12-02);
    # the suite's searches profile only where a test asks (``--profile``) for what it checks.
    monkeypatch.setenv("MAXCODE_PROFILE", "0")
    # A temporary folder of the test's own, for it and every process it starts: the scratch
    # folders of its runs are made in it, so their command lines name it, and a test asks
    # whether *its* processes are gone (``processes_of_this_test``) while the suite's other
    # worker runs evaluations of its own. Others may enter it, as the sandbox's uid must.
    # Always in the same place, never inside another test's (a module's fixture and its
    # tests): the paths a run starts from have one length, and an instruction count includes
    # the loader's reading of the program's path.
    scratch = Path(tempfile.mkdtemp(prefix="maxcode-test-", dir=_SCRATCH_BASE))
    scratch.chmod(0o755)
    SCRATCH_ROOTS.append(scratch)
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return home


_SCRATCH_BASE = scratch_base()
"""Where the tests' temporary folders go: where the sandbox's would without them."""

SCRATCH_ROOTS: list[Path] = []
"""The tests' temporary folders this process made (removed when its session ends)."""


def processes_with(*fragments: str) -> list[str]:
    """Pids of live (not zombie) processes whose command line contains every fragment."""
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
        if all(part.encode() in cmdline for part in fragments) and state != "Z":
            found.append(entry)
    return found


def processes_of_this_test(fragment: str) -> list[str]:
    """``processes_with(fragment)`` among the processes that name this test's temporary
    folder on their command line (what ``make_hermetic`` made; every run's scratch folder is
    in it), not those of a test running beside it."""
    return processes_with(fragment, os.environ["TMPDIR"])


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


ROW_BY_ROW = (
    (REPO / "tests" / "fixtures" / "kernelbench" / "cheats" / "problem.py")
    .read_text()
    .replace(
        "return torch.tanh(x @ self.weight) * 2.0",
        "return torch.stack([torch.tanh(row @ self.weight) * 2.0 for row in x])",
    )
)
"""The KernelBench cheats' problem with a row-by-row forward: the honest rewrite (``honest.py``,
one matrix product) is many times faster, whatever the noise of the machine."""
assert "for row in x" in ROW_BY_ROW


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


def render_headless(page: Path | str) -> tuple[str, str]:
    """Load a page (a file, or an address) in headless Chromium; returns (DOM after scripts
    ran, browser log)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is not installed"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                "--dump-dom", page.as_uri() if isinstance(page, Path) else page,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    return done.stdout, done.stderr
