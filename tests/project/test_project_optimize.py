"""``maxcode optimize`` on a project over the real HTTP path (the fake OpenAI server on
loopback): a multi-file answer, SEARCH/REPLACE edits and one malformed edit; and offline with
the rules proposer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_optimize
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic, serving

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / "examples" / "project" / "slowpkg"
FAST = REPO / "tests" / "project" / "fixtures" / "slowpkg" / "fast" / "slowpkg"
CMAKE = REPO / "examples" / "project" / "cmake_stats"
CMAKE_FAST = REPO / "tests" / "project" / "fixtures" / "cmake_stats" / "fast" / "src"

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

# The C++ project: a SEARCH/REPLACE edit (trial division up to the square root), then both
# sources in full (a sieve, a sort); the same malformed edit beside each.
SQRT_EDIT = (
    "Stop the trial division at the square root.\n\n"
    "src/primes.cpp\n```cpp\n<<<<<<< SEARCH\n    for (int d = 2; d < n; ++d) {\n=======\n"
    "    for (int d = 2; d * d <= n; ++d) {\n>>>>>>> REPLACE\n```\n"
)
CMAKE_MULTI_FILE = (
    "A sieve for the primes, a sort for the distinct values.\n\n"
    f"```cpp src/primes.cpp\n{(CMAKE_FAST / 'primes.cpp').read_text()}```\n\n"
    f"### src/distinct.cpp\n```cpp\n{(CMAKE_FAST / 'distinct.cpp').read_text()}```\n"
)
CMAKE_MALFORMED = (
    "src/distinct.cpp\n<<<<<<< SEARCH\n    std::unordered_set<int> seen;\n=======\n"
    "    return 0;\n>>>>>>> REPLACE\n"
)


def scripted(first: list[str], then: list[str]) -> Callable[[dict[str, Any]], Step]:
    """A policy that answers ``first`` to its first prompt and ``then`` to every later one;
    the critic always gives the same short critique."""
    calls: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> Step:
        if is_critic(body):
            return Step(texts=["Diagnosis: the work is quadratic.\nSuggestions:\n- Do less."])
        calls.append(body)
        return Step(texts=first if len(calls) == 1 else then)

    return respond


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serving() as fake:
        yield fake


def critiques_and_prompts(server: FakeLLMServer) -> tuple[list[str], list[str]]:
    critiques, prompts = [], []
    for seen in server.seen:
        text = seen.body["messages"][-1]["content"]
        (critiques if is_critic(seen.body) else prompts).append(text)
    return critiques, prompts


def optimize_over_http(
    task: Path, server: FakeLLMServer, tmp_path: Path, best: Path, *options: str
) -> dict[str, Any]:
    """``maxcode optimize TASK`` against the fake server: a CUDA-LLM search with MaxCode, two
    levels of two candidates, the best program written to ``best``; its JSON result."""
    done = run_optimize(
        str(task), "--model", "openai/gpt-4o-mini", "--base-url", server.url,
        "--method", "cuda-llm", "--maxcode", "--depth", "2", "--candidates", "2", *options,
        "--store", str(tmp_path / "runs.db"), "--output", str(best), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_optimize_a_python_project_over_http(server: FakeLLMServer, tmp_path: Path) -> None:
    server.responder = scripted([HALF, MALFORMED], [MULTI_FILE, MALFORMED])
    best = tmp_path / "best"
    result = optimize_over_http(PYTHON, server, tmp_path, best, "--repeats", "2")
    # HALF and the malformed edit on the reference; MULTI_FILE and the malformed edit on HALF
    # (a failed edit is judged, as a build error, once per parent).
    assert result["evaluations"] == 4
    assert result["best_program"] == str(best)
    assert (best / "slowpkg" / "paths.py").read_text() == (FAST / "paths.py").read_text()
    assert (best / "slowpkg" / "common.py").read_text() == (FAST / "common.py").read_text()
    critiques, prompts = critiques_and_prompts(server)
    assert any("the SEARCH text is not in slowpkg/paths.py" in text for text in critiques)
    assert "```python slowpkg/common.py" in prompts[0]  # files shown named by their paths
    assert "tests/test_slowpkg.py" not in prompts[0]  # read-only files are not shown


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_optimize_a_cmake_project_over_http(server: FakeLLMServer, tmp_path: Path) -> None:
    server.responder = scripted([SQRT_EDIT, CMAKE_MALFORMED], [CMAKE_MULTI_FILE, CMAKE_MALFORMED])
    best = tmp_path / "best"
    result = optimize_over_http(CMAKE, server, tmp_path, best, "--metric", "instructions")
    # The square-root edit and the malformed edit on the reference; both files and the
    # malformed edit on the square-root version. Instruction counts are deterministic, so
    # the sieve and the sort win.
    assert result["evaluations"] == 4
    assert result["best_program"] == str(best)
    for name in ("primes.cpp", "distinct.cpp"):
        assert (best / "src" / name).read_text() == (CMAKE_FAST / name).read_text()
    critiques, prompts = critiques_and_prompts(server)
    assert any("the SEARCH text is not in src/distinct.cpp" in text for text in critiques)
    assert "d * d <= n" in prompts[1]  # the edited program is the one improved next
    assert "tests/test_stats.cpp" not in prompts[0]


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
