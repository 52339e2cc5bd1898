"""The README and the docs site: every code example runs as written, the site builds with
``mkdocs build --strict``, and its home page renders in headless Chromium.

How a page's examples are run (what a page's author needs to know):

- A fenced block whose language is ``bash``, ``console`` or ``python`` is an example and runs;
  ``text`` (a synopsis, printed output), ``yaml``, ``toml``, ``cpp`` and the like are shown only.
  In a ``console`` block the lines that start with ``$ `` are the commands; the rest is output.
- An example that cannot run here is preceded by ``<!-- not run: REASON -->`` (a GPU, a Ray
  cluster, a paid model); the reason is required.
- Every page shares one ``MAXCODE_HOME`` (its run store and build cache), as on a user's
  machine. A page's examples run in order, in one fresh folder of their own that holds
  ``examples`` and ``tests`` (links to the repository's), so a later example may use what an
  earlier one wrote (``--store runs.db``, ``-o report.html``), and relative paths read as in a
  checkout.
- Every LLM is the scripted server on 127.0.0.1 (``OPENAI_BASE_URL`` and
  ``ANTHROPIC_BASE_URL`` point at it, and a page's ``http://localhost:8000/v1`` is replaced by
  its address): for a bundled C++ task it proposes the task's known fast rewrite, otherwise it
  answers the prompt's own program back; as the critic it gives a fixed diagnosis.
- Timing is cut short: ``MAXCODE_TIMING_BUDGET_S`` is small, a reported KernelBench number
  takes one round (``MAXCODE_MOST_ROUNDS``) and profiles are off, so an example's numbers are
  not asserted, only that it ran (exit 0) and printed something.
- ``bash scripts/install.sh && `` in front of a command is dropped: CI runs the install itself
  before the tests (``.ci/run``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FIXTURES, REPO, render_headless
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic, serving

RUN = {"bash", "console", "python"}
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"^(?P<fence>```+|~~~+)(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>[^>]*?)\s*-->\s*$")
LOCAL_SERVER = "http://localhost:8000/v1"


@dataclass
class Example:
    page: Path
    line: int
    language: str
    body: str
    not_run: str | None


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        language = match["info"].strip().split(" ")[0].lower()
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        why = NOT_RUN.search(before)
        found.append(
            Example(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=language,
                body=match["body"],
                not_run=why["why"] if why else None,
            )
        )
    return found


def _answer(body: dict[str, Any]) -> Step:
    if is_critic(body):
        return Step(texts=["Diagnosis: fine.\nSuggestions:\n- none"])
    prompt = str(body["messages"][-1]["content"])
    name = re.search(r"^# Task: (\S+)", prompt, re.M)
    if name and (FIXTURES / name.group(1) / "fast.cpp").is_file():
        return Step(texts=[f"```cpp\n{(FIXTURES / name.group(1) / 'fast.cpp').read_text()}```"])
    program = re.search(r"^```(\w*)\n(.*?)^```", prompt, re.M | re.S)
    if program:
        return Step(texts=[f"```{program.group(1)}\n{program.group(2)}```"])
    return Step(texts=["1.0"])


def _script(example: Example, server: FakeLLMServer) -> list[str]:
    """The command to run an example (a list of argv)."""
    body = example.body.replace(LOCAL_SERVER, server.url)
    if example.language == "python":
        return [sys.executable, "-c", body]
    if example.language == "console":
        lines = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
        body = "\n".join(lines) + "\n"
    body = body.replace("bash scripts/install.sh && ", "")
    return ["bash", "-e", "-o", "pipefail", "-c", body]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``MAXCODE_HOME`` for every page, as on a user's machine: a KernelBench candidate two
    pages judge is built once (its build cache is there)."""
    return tmp_path_factory.mktemp("docs-home")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with serving(_answer) as fake:
        yield fake


def test_the_pages_have_examples_and_say_why_one_is_not_run() -> None:
    shown = [example for page in PAGES for example in examples(page)]
    runnable = [example for example in shown if example.language in RUN]
    assert len(runnable) >= 10, "the docs show commands"
    for example in runnable:
        if example.not_run is not None:
            assert len(example.not_run) >= 8, f"{example.page}:{example.line}: say why"


def _runnable(page: Path) -> list[Example]:
    return [e for e in examples(page) if e.language in RUN and e.not_run is None]


SHOWN = [page for page in PAGES if _runnable(page)]


@pytest.mark.parametrize("page", SHOWN, ids=lambda page: str(page.relative_to(REPO)))
def test_every_example_on_the_page_runs(
    page: Path, server: FakeLLMServer, home: Path, tmp_path: Path
) -> None:
    runnable = _runnable(page)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "tests"):
        (work / name).symlink_to(REPO / name)
    env = {
        **os.environ,
        "MAXCODE_HOME": str(home),
        "MAXCODE_TIMING_BUDGET_S": "0.25",
        "MAXCODE_PROFILE": "0",
        "MAXCODE_MOST_ROUNDS": "1",
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "OPENAI_BASE_URL": server.url,
        "ANTHROPIC_BASE_URL": server.anthropic_url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for example in runnable:
        done = subprocess.run(
            _script(example, server),
            cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        where = f"{page.relative_to(REPO)}:{example.line}"
        assert done.returncode == 0, f"{where}\n{example.body}\n{done.stderr[-3000:]}"
        assert (done.stdout + done.stderr).strip(), f"{where}: printed nothing"


def test_the_site_builds_strict_and_its_home_page_renders(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs") or str(Path(sys.executable).parent / "mkdocs")
    assert Path(mkdocs).exists(), "mkdocs is not installed (pip install -e '.[docs]')"
    site = tmp_path / "site"
    built = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    # The command reference is generated: every command has its section, defaults read well.
    import click

    from maxcode.cli import main

    commands = (site / "reference" / "cli" / "index.html").read_text()
    for name in main.list_commands(click.Context(main)):
        assert f'id="maxcode-{name}"' in commands, name
    assert "Sentinel" not in commands
    # Served over HTTP on loopback, as a browser reads a site (the search index does not load
    # from file:// addresses).
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as http:
        threading.Thread(target=http.serve_forever, daemon=True).start()
        try:
            dom, log = render_headless(f"http://127.0.0.1:{http.server_address[1]}/")
        finally:
            http.shutdown()
    assert 'class="md-nav' in dom and "Getting started" in dom, log[-2000:]
    assert "Uncaught" not in log and "CONSOLE" not in log, log[-2000:]
