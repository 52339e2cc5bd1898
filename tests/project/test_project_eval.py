"""``maxcode eval`` on the example projects: a faster rewrite is correct and measured faster,
a wrong one fails with the failing test's output, one that edits a test is void. Real
commands, real sandbox; assertions on verdicts, flags and instruction counts, not on time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import run_maxcode

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / "examples" / "project" / "slowpkg"
CMAKE = REPO / "examples" / "project" / "cmake_stats"
FIXTURES = REPO / "tests" / "project" / "fixtures"


def eval_json(*args: str) -> dict:
    done = run_maxcode("eval", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_python_project_fast_wrong_and_test_editing_candidates() -> None:
    fast = eval_json(str(PYTHON), str(FIXTURES / "slowpkg" / "fast"), "--repeats", "1")
    assert fast["correct"] and fast["suspect"] is None and fast["flags"] == []
    assert fast["metric"] == "wall" and fast["speedup"] > 0
    assert fast["speedup_interval"] is not None and fast["repeats"] == 1
    assert {"build", "check", "bench"} <= set(fast["phases"])

    wrong = eval_json(str(PYTHON), str(FIXTURES / "slowpkg" / "wrong.diff"), "--repeats", "1")
    assert not wrong["correct"] and wrong["error"]["kind"] == "wrong_answer"
    assert "assert 2 == 3" in wrong["error"]["message"]  # pytest's own report of the failure
    assert "test_count_common_counts_duplicates_of_ids" in wrong["error"]["message"]

    cheat = eval_json(str(PYTHON), str(FIXTURES / "slowpkg" / "cheat"), "--repeats", "1")
    assert cheat["correct"] and cheat["speedup"] == 0
    assert cheat["suspect"].startswith("read-only: the candidate changed tests/test_slowpkg.py")


def test_a_run_that_rewrites_the_bench_is_void(tmp_path: Path) -> None:
    candidate = tmp_path / "candidate" / "slowpkg"
    shutil.copytree(FIXTURES / "slowpkg" / "fast" / "slowpkg", candidate)
    sneaky = (candidate / "paths.py").read_text() + (
        "\nimport pathlib\n"
        "_bench = pathlib.Path('bench.py')\n"
        "if _bench.exists():\n"
        "    _bench.write_text('print(1)\\n')\n"
    )
    (candidate / "paths.py").write_text(sneaky)
    verdict = eval_json(str(PYTHON), str(tmp_path / "candidate"), "--repeats", "1")
    assert verdict["suspect"] is not None and verdict["suspect"].startswith("read-only:")
    assert "bench.py" in verdict["suspect"] and verdict["speedup"] == 0


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_cmake_project_fast_wrong_and_test_editing_candidates() -> None:
    fast = eval_json(str(CMAKE), str(FIXTURES / "cmake_stats" / "fast"), "--metric", "instructions")
    assert fast["correct"] and fast["suspect"] is None and fast["metric"] == "instructions"
    assert fast["candidate_cost"] < fast["reference_cost"]  # instruction counts: deterministic
    assert fast["speedup"] > 1

    wrong = eval_json(str(CMAKE), str(FIXTURES / "cmake_stats" / "primes.cpp"), "--repeats", "1")
    assert not wrong["correct"]
    assert "FAILED: count_primes_below(3) == 1" in wrong["error"]["message"]

    cheat = eval_json(str(CMAKE), str(FIXTURES / "cmake_stats" / "cheat"), "--repeats", "1")
    assert cheat["speedup"] == 0
    assert cheat["suspect"].startswith("read-only: the candidate changed tests/test_stats.cpp")


def test_a_candidate_that_does_not_build_is_a_build_error(tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    broken = tmp_path / "primes.cpp"
    broken.write_text('#include "stats.hpp"\nstd::size_t count_primes_below(int b) { return b }\n')
    verdict = eval_json(str(CMAKE), str(broken), "--repeats", "1")
    assert not verdict["compiled"] and verdict["error"]["kind"] == "compile_error"
    assert "error" in verdict["compile_output"]


def test_a_screen_stops_timing_once_the_candidate_is_surely_below_the_bar(
    tmp_path: Path,
) -> None:
    """A search's screen times a project's bench until the candidate cannot be the best (its
    interval wholly below the bar, from six rounds on), not all ``repeats``; without a bar,
    or with a bar it is not below, every round is timed."""
    from maxcode.kinds import evaluate_task
    from maxcode.kinds.load import load_task
    from maxcode.kinds.project.evaluate_project import load_candidate

    project = tmp_path / "sleepy"
    project.mkdir()
    (project / "work.sh").write_text("exit 0\n")
    (project / "task.toml").write_text(
        'name = "sleepy"\nkind = "project"\neditable = ["work.sh"]\n'
        'check = "sh work.sh"\nbench = "sh work.sh"\nrepeats = 9\n'
    )
    slower = tmp_path / "slower" / "work.sh"
    slower.parent.mkdir()
    slower.write_text("sleep 0.2\nexit 0\n")
    task = load_task(str(project))
    source = load_candidate(task, slower.parent)  # type: ignore[arg-type]
    screened = evaluate_task(task, source, bar=1.0)
    assert screened.correct and screened.repeats == 6, screened.speedup_interval
    assert screened.speedup_interval is not None and screened.speedup_interval[1] < 1.0
    assert evaluate_task(task, source).repeats == 9
    assert evaluate_task(task, source, bar=1e-6).repeats == 9
