"""``maxcode bench`` and ``maxcode report``: the table, and reports that render in Chromium."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from maxcode.errors import TaskError
from maxcode.search.bench.suite import expand_suite
from maxcode.search.bench.table import bench_table
from maxcode.store import RunStore
from maxcode.types import Feedback
from tests.helpers import EXAMPLES, FIXTURES, render_headless, run_maxcode, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step, is_critic, serving


def _answer(body: dict[str, Any]) -> Step:
    """Policy: the task's known fast rewrite, then its wrong one; critic: a fixed diagnosis."""
    prompt = body["messages"][-1]["content"]
    if is_critic(body):
        return Step(texts=["Diagnosis: fine.\nSuggestions:\n- none"])
    name = re.search(r"^# Task: (\S+)", prompt, re.MULTILINE)
    assert name, prompt[:200]
    fast = (FIXTURES / name.group(1) / "fast.cpp").read_text()
    wrong = (FIXTURES / name.group(1) / "wrong.cpp").read_text()
    return Step(texts=[f"```cpp\n{fast}```", f"```cpp\n{wrong}```"], prompt_tokens=700)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serving(_answer) as fake:
        yield fake


def _maxcode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
        check=False,
    )


def test_bench_of_two_methods_on_the_bundled_tasks_and_its_reports(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    store = tmp_path / "bench.db"
    suite = tmp_path / "suite"  # two of the bundled tasks: the suite has a time budget
    for name in ("pair_count_quadratic", "prime_sieve"):
        shutil.copytree(EXAMPLES / name, suite / name)
    done = _maxcode(
        "bench", str(suite), "--method", "best-of-n", "--method", "cuda-llm+maxcode",
        "--model", "openai/gpt-4o-mini", "--base-url", server.url, "--depth", "1",
        "--candidates", "2", "--repeats", "1", "--store", str(store), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Each run's progress line names the method as the bench does (the +maxcode variant too).
    assert done.stderr.count(" cuda-llm+maxcode: done") == 2, done.stderr
    result = json.loads(done.stdout)
    tasks = 2
    assert len(result["tasks"]) == tasks
    rows = {row["label"]: row for row in result["methods"]}
    assert list(rows) == ["best-of-n", "cuda-llm+maxcode"]
    for row in rows.values():
        assert row["tasks"] == tasks
        assert row["correct"] == 1.0
        assert row["mean_speedup"] > 1.5 and row["geomean_speedup"] > 1.5
        assert row["fast_p"]["fast_0"] == 1.0 and row["fast_p"]["fast_1.5"] > 0.5
        assert 1.0 <= row["average_rank"] <= 2.0
        assert row["evaluations"] == 2 * tasks  # the fast and the wrong rewrite of each task
        assert row["tokens"] > 0 and row["cost_usd"] > 0
        assert row["unfinished"] == 0
    assert sum(row["average_rank"] for row in rows.values()) == pytest.approx(3.0)

    # The table, as a person sees it (a finished bench resumes to its table at once).
    bench_id = result["bench_id"]
    shown = _maxcode("bench", "--resume", bench_id, "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    for words in ("best-of-n", "cuda-llm+maxcode", "geomean", "fast_1.5", "rank"):
        assert words in shown.stdout

    listed = json.loads(run_maxcode("runs", "--store", str(store), "--json").stdout)["runs"]
    assert len(listed) == 2 * tasks
    page = tmp_path / "run.html"
    made = _maxcode("report", listed[0]["run_id"], "--store", str(store), "-o", str(page))
    assert made.returncode == 0, made.stderr
    dom, log = render_headless(page)
    assert 'data-rendered="yes"' in dom, log[-2000:]
    assert 'data-plots="3"' in dom
    assert "Uncaught" not in log and "CONSOLE" not in log
    assert "Search tree" in dom and "<polyline" in dom and "<circle" in dom
    assert "Against the reference" in dom  # the best program's diff

    bench_page = tmp_path / "bench.html"
    made = _maxcode("report", "--bench", bench_id, "--store", str(store), "-o", str(bench_page))
    assert made.returncode == 0, made.stderr
    dom, log = render_headless(bench_page)
    assert 'data-rendered="yes"' in dom and 'data-plots="1"' in dom
    assert "Uncaught" not in log and "CONSOLE" not in log
    assert dom.count("<polyline") == 2  # one speedup-against-budget curve per method


def _feedback(speedup: float) -> Feedback:
    correct = speedup > 0
    return Feedback(
        task="t", compiled=True, correct=correct, speedup=speedup, metric="instructions",
        reference_cost=1.0, candidate_cost=1.0 / speedup if correct else None,
        tests_passed=1 if correct else 0, tests_total=1,
    )  # fmt: skip


def test_table_follows_the_pie_and_kernelbench_conventions(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "t.db")
    task_specs = ["a", "b", "c"]
    store.create_bench("b1", {}, task_specs, ["m1", "m2"], 1)
    # Best speedup per (task, method); 0 means no correct program was found.
    results = {("a", "m1"): 3.0, ("b", "m1"): 0.0, ("c", "m1"): 1.2,
               ("a", "m2"): 1.5, ("b", "m2"): 2.0, ("c", "m2"): 1.2}  # fmt: skip
    for number, ((task, label), speedup) in enumerate(results.items()):
        run_id = f"r{number}"
        store.create_run(run_id, task, task, "cpp", "best-of-n", {}, status="done",
                         bench_id="b1", bench_label=label, bench_trial=0)  # fmt: skip
        store.put_evaluation(run_id, "k", "sha", _feedback(speedup), 1.0)
        store.update_run(run_id, best_speedup=max(1.0, speedup))
    rows, per_task = bench_table(store, "b1")
    m1, m2 = rows
    assert m1.mean_speedup == pytest.approx((3.0 + 1.0 + 1.2) / 3)
    assert m1.geomean_speedup == pytest.approx(math.exp((math.log(3.0) + math.log(1.2)) / 3))
    assert m1.correct == pytest.approx(2 / 3)
    assert m1.fast_p == pytest.approx(
        {"fast_0": 2 / 3, "fast_1": 2 / 3, "fast_1.1": 2 / 3, "fast_1.5": 1 / 3, "fast_2": 1 / 3}
    )
    assert m2.fast_p["fast_1.5"] == pytest.approx(1 / 3)  # 1.5 is not faster than 1.5
    # Ranks: a -> m1 first; b -> m2 first; c -> tie (1.5 each).
    assert m1.average_rank == pytest.approx((1 + 2 + 1.5) / 3)
    assert m2.average_rank == pytest.approx((2 + 1 + 1.5) / 3)
    assert per_task["b"] == {"m1": 1.0, "m2": 2.0}


def test_suites_expand_from_folders_and_pie_files(tmp_path: Path) -> None:
    assert expand_suite([str(EXAMPLES)]) == sorted(
        str(path) for path in EXAMPLES.iterdir() if (path / "task.toml").is_file()
    )
    single = write_task(tmp_path / "one")
    assert expand_suite([str(single)]) == [str(single)]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(
        '{"problem_id": "p1", "src_code": "x"}\n\n{"problem_id": "p2", "src_code": "y"}\n'
    )
    assert expand_suite([str(jsonl)]) == [f"{jsonl}#0", f"{jsonl}#1"]
    with pytest.raises(TaskError, match="task not found"):
        expand_suite([str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="neither a task folder"):
        expand_suite([str(tmp_path / "empty")])


def test_bench_usage_errors_exit_2(tmp_path: Path) -> None:
    done = _maxcode("bench", str(EXAMPLES / "io_bound_sum"), "--method", "annealing",
                    "--store", str(tmp_path / "s.db"))  # fmt: skip
    assert done.returncode == 2 and "unknown method 'annealing'" in done.stderr
    done = _maxcode("bench", "--method", "beam", "--store", str(tmp_path / "s.db"))
    assert done.returncode == 2 and "name the TASKS" in done.stderr
    done = _maxcode("report", "nosuchrun", "-o", str(tmp_path / "r.html"),
                    "--store", str(tmp_path / "s.db"))  # fmt: skip
    assert done.returncode == 2 and "no run" in done.stderr


def test_resuming_a_bench_refuses_settings_it_would_ignore(tmp_path: Path) -> None:
    store = str(tmp_path / "bench.db")
    for extra in (["--depth", "3"], ["--method", "beam"], ["--max-usd", "1"]):
        done = run_maxcode("bench", "--resume", "abc", "--store", store, *extra)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "error: --resume continues a bench as it was set up: it takes only --base-url,"
            " --store and --json"
        ]
