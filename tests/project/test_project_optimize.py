"""``maxcode optimize`` on a project over the real HTTP path (the fake OpenAI server on
loopback): a multi-file answer, SEARCH/REPLACE edits and one malformed edit; and offline with
the rules proposer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_optimize
from tests.llm.fake_llm_server import FakeLLMServer, Step

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / "examples" / "project" / "slowpkg"
FAST = REPO / "tests" / "project" / "fixtures" / "slowpkg" / "fast" / "slowpkg"

MULTI_FILE = (
    "Sets for membership, a closed form for the paths.\n\n"
    f"```python slowpkg/common.py\n{(FAST / 'common.py').read_text()}```\n\n"
    f"File: slowpkg/paths.py\n```python\n{(FAST / 'paths.py').read_text()}```\n"
)
HALF = (
    "Only the membership test.\n\n"
    "slowpkg/common.py\n```python\n<<<<<<< SEARCH\n    count = 0\n    for item in ids:\n"
    "=======\n    others = set(others)\n    count = 0\n    for item in ids:\n"
    ">>>>>>> REPLACE\n```\n"
)
MALFORMED = (
    "slowpkg/paths.py\n<<<<<<< SEARCH\n    return grid_paths(rows, cols)\n=======\n"
    "    return 0\n>>>>>>> REPLACE\n"
)


def is_critic(body: dict[str, Any]) -> bool:
    return any("You review one attempt" in m.get("content", "") for m in body["messages"])


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    fake = FakeLLMServer()
    calls: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=["Diagnosis: membership scans a list.\nSuggestions:\n- Use a set."])
        calls.append(body)
        if len(calls) == 1:
            return Step(texts=[HALF, MALFORMED])
        return Step(texts=[MULTI_FILE, MALFORMED])

    fake.responder = respond
    try:
        yield fake
    finally:
        fake.close()


def test_optimize_a_python_project_over_http(server: FakeLLMServer, tmp_path: Path) -> None:
    best = tmp_path / "best"
    done = run_optimize(
        str(PYTHON), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
        "--method", "cuda-llm", "--maxcode", "--depth", "2", "--candidates", "2",
        "--repeats", "2", "--store", str(tmp_path / "runs.db"), "--output", str(best), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # HALF and the malformed edit on the reference; MULTI_FILE and the malformed edit on HALF
    # (a failed edit is judged, as a build error, once per parent).
    assert result["evaluations"] == 4
    assert result["best_program"] == str(best)
    assert (best / "slowpkg" / "paths.py").read_text() == (FAST / "paths.py").read_text()
    assert (best / "slowpkg" / "common.py").read_text() == (FAST / "common.py").read_text()
    critiques = [
        seen.body["messages"][-1]["content"] for seen in server.seen if is_critic(seen.body)
    ]
    assert any("the SEARCH text is not in slowpkg/paths.py" in text for text in critiques)
    prompts = [
        seen.body["messages"][-1]["content"] for seen in server.seen if not is_critic(seen.body)
    ]
    assert "```python slowpkg/common.py" in prompts[0]  # files shown named by their paths
    assert "tests/test_slowpkg.py" not in prompts[0]  # read-only files are not shown


def test_rules_proposer_optimizes_a_python_project_offline(tmp_path: Path) -> None:
    best = tmp_path / "best"
    done = run_optimize(
        str(PYTHON), "--depth", "1", "--candidates", "1", "--repeats", "2",
        "--store", str(tmp_path / "runs.db"), "--output", str(best), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "offline rules proposer" in done.stderr
    result = json.loads(done.stdout)
    assert result["evaluations"] == 1 and result["void"] == []
    common = (best / "slowpkg" / "common.py").read_text()
    paths = (best / "slowpkg" / "paths.py").read_text()
    assert "others = set(others)" in common and "@functools.cache" in paths
