"""What a bench reports: each run's verified speedup (the unverified one beside it), a program
confirmed at or below 1x is no result, and every method gets the same number of evaluations."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from pathlib import Path
from typing import Any

from maxcode.search.bench.table import bench_table
from maxcode.search.results import confirms, run_result
from tests.helpers import ECHO_SUM, run_maxcode, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step
from tests.search.scripted import feedback_of, scripted_search


def _program(number: int, reward: float, again: float | None = None) -> str:
    marks = f"#pragma candidate {number} reward {reward}\n"
    if again is not None:
        marks += f"#pragma judged again {again}\n"
    return f"```cpp\n{marks}int variant_{number} = {number};\n{ECHO_SUM}```"


def _verified_bench(tmp_path: Path, replies: list[str]) -> tuple[Any, Any]:
    store, search = scripted_search(
        tmp_path, replies, bench_id="b1", method="best-of-n", candidates=len(replies)
    )

    async def go() -> None:
        await search.run()
        await search.verify()

    asyncio.run(go())
    store.update_run("r1", status="done")
    record = store.get_run("r1")
    assert record is not None
    return store, record


def test_a_run_whose_best_fails_reverification_counts_its_verified_speedup(
    tmp_path: Path,
) -> None:
    # The 5x program is wrong when judged again; the 2x one is confirmed at 1.8x.
    replies = [_program(0, 5.0, again=0.0), _program(1, 2.0, again=1.8), _program(2, 1.2)]
    store, record = _verified_bench(tmp_path, replies)
    assert record.best_speedup == 5.0
    result = run_result(store, record)
    assert result.verified and result.speedup == 1.8 and result.node == "1.1"
    assert result.unverified == 5.0
    (row,), per_task = bench_table(store, "b1")
    assert row.mean_speedup == 1.8 and row.unverified_mean_speedup == 5.0
    assert row.geomean_speedup == 1.8 and row.fast_p["fast_1.5"] == 1.0
    assert row.fast_p["fast_2"] == 0.0  # the unverified 5x does not count
    assert list(per_task.values()) == [{"best-of-n": 1.8}]


def test_a_program_confirmed_below_1x_is_no_result(tmp_path: Path) -> None:
    assert not confirms(feedback_of(0.9)) and confirms(feedback_of(1.1))
    replies = [_program(0, 1.5, again=0.95)]
    store, record = _verified_bench(tmp_path, replies)
    result = run_result(store, record)
    assert result.verified and result.speedup == 1.0 and result.node is None  # the reference
    (row,), _ = bench_table(store, "b1")
    assert row.mean_speedup == 1.0 and row.unverified_mean_speedup == 1.5
    assert row.fast_p["fast_1"] == 0.0


def test_best_of_n_and_beam_get_the_same_number_of_evaluations(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    counter = itertools.count()
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Step:
        with lock:
            numbers = [next(counter) for _ in range(int(body.get("n") or 1))]
        texts = [
            f"```cpp\n{ECHO_SUM.replace('long long a, b;', f'long long a, b, v{n} = {n};')}```"
            for n in numbers
        ]
        return Step(texts=texts)

    server = FakeLLMServer()
    server.responder = respond
    try:
        done = run_maxcode(
            "bench", str(task), "--method", "best-of-n", "--method", "beam",
            "--model", "openai/gpt-4o-mini", "--base-url", server.url, "--critic-model", "rules",
            "--candidates", "2", "--depth", "1", "--max-evals", "3", "--trials", "2",
            "--repeats", "1", "--store", str(tmp_path / "b.db"), "--json",
            timeout=600,
        )  # fmt: skip
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    rows = {row["label"]: row for row in json.loads(done.stdout)["methods"]}
    for row in rows.values():
        assert row["max_evals"] == 3 and row["evaluations_per_run"] == 3
        assert row["evaluations"] == 6 and row["trials"] == 2
        assert set(row["spread"]) >= {"mean_speedup", "geomean_speedup", "correct", "fast_1"}
        assert isinstance(row["unverified_mean_speedup"], float)
    shown = run_maxcode("bench", "--resume", json.loads(done.stdout)["bench_id"],
                        "--store", str(tmp_path / "b.db"))  # fmt: skip
    assert "3 evaluations per run for every method" in shown.stdout
    assert "3.0/3" in shown.stdout and "±" in shown.stdout
