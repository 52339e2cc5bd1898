"""Runs stored by an older maxcode: verdicts without ``suspect`` (feedback schema 3) still load,
and are judged by today's integrity table; a store made before ``m004_isolation`` migrates."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

from maxcode.report import run_report
from maxcode.search.driver import summarize
from maxcode.search.program_key import legacy_key
from maxcode.search.results import evaluation_rewards
from maxcode.search.results import run_result as _result
from maxcode.store import RunStore
from maxcode.store.migrations import MIGRATIONS
from tests.helpers import ECHO_SUM, write_task

OLD_FLAG = "processes: the candidate left processes running after it exited (killed)"


def _old_feedback(speedup: float, flags: list[str]) -> str:
    """A verdict as schema 3 wrote it: no ``suspect``, no ``claimed_speedup``."""
    return json.dumps(
        {
            "schema_version": 3,
            "task": "sum",
            "compiled": True,
            "correct": True,
            "speedup": speedup,
            "metric": "instructions",
            "reference_cost": 100.0,
            "candidate_cost": 100.0 / speedup,
            "tests_passed": 2,
            "tests_total": 2,
            "flags": flags,
            "isolation": "bwrap",
        }
    )


def _old_store(path: Path, task: Path) -> None:
    """A store as m001..m003 left it, with one finished run whose best carried a flag."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for name, script in MIGRATIONS:
        if name == "m004_isolation":
            break
        for statement in script.split(";"):
            if statement.strip():
                connection.execute(statement)
        connection.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, time.time()))
    now = time.time()
    config = {"method": "best-of-n", "metric": "instructions", "verify": False}
    connection.execute(
        "INSERT INTO runs (run_id, created_at, updated_at, task_spec, task_name, task_kind,"
        " method, config_json, status, best_node_id, best_speedup, trace_json)"
        " VALUES ('old1', ?, ?, ?, 'sum', 'cpp', 'best-of-n', ?, 'done', '1.0', 8.0, '[8.0]')",
        (now, now, str(task), json.dumps(config)),
    )
    for index, (speedup, flags) in enumerate([(8.0, [OLD_FLAG]), (2.0, [])]):
        source = ECHO_SUM + f"// attempt {index}\n"
        digest = hashlib.sha256(source.encode()).hexdigest()
        connection.execute(
            "INSERT INTO candidates VALUES (?, ?, 'cpp', ?)", (digest, source, now + index)
        )
        connection.execute(
            "INSERT INTO nodes (run_id, node_id, parent_id, depth, step, candidate_sha256,"
            " observation_parts, prompt_call, completion, created_at)"
            " VALUES ('old1', ?, '0', 1, 1, ?, '', NULL, '', ?)",
            (f"1.{index}", digest, now + index),
        )
        connection.execute(
            "INSERT INTO evaluations VALUES ('old1', ?, ?, ?, ?, 1.0, ?)",
            (legacy_key(source), digest, speedup, _old_feedback(speedup, flags), now + index),
        )
    connection.close()


def test_old_verdicts_load_and_are_judged_by_todays_table(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    _old_store(tmp_path / "old.db", task)
    store = RunStore(tmp_path / "old.db")  # applies m004_isolation
    record = store.get_run("old1")
    assert record is not None and record.isolation == "" and record.unsafe_isolation is False
    assert evaluation_rewards(store, "old1") == [0.0, 2.0]
    (voided,) = store.void_results("old1")
    assert voided.node_id == "1.0" and voided.reason == OLD_FLAG
    assert voided.claimed_speedup == 8.0
    # The bench counts the honest 2x, not the 8x the old run stored as its best.
    assert _result(store, record).speedup == 2.0
    summary = summarize(store, "old1", tmp_path / "best.cpp")
    assert summary.void[0]["reason"] == OLD_FLAG
    html = run_report(store, "old1")
    assert "Best program: node 1.1" in html and "Void results" in html


def _schema_7(**details: object) -> dict[str, object]:
    """A verdict as schema 7 wrote it: KernelBench's keys and ``cpp_profile`` at the top."""
    return {
        "schema_version": 7,
        "task": "p",
        "compiled": True,
        "correct": True,
        "speedup": 1.5,
        "metric": "wall",
        "reference_cost": 3e-3,
        "candidate_cost": 2e-3,
        "tests_passed": 3,
        "tests_total": 3,
        "device": "cpu",
        **details,
    }


def test_verdicts_of_schema_7_are_rewritten_with_their_details_apart(tmp_path: Path) -> None:
    """``m006_feedback_details``: a KernelBench verdict's own keys move under ``kernelbench``,
    a C++ verdict's profile under ``cpp``; a row that cannot be read is left as it was."""
    path = tmp_path / "runs.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for name, script in MIGRATIONS:
        if not isinstance(script, str):
            break
        for statement in script.split(";"):
            if statement.strip():
                connection.execute(statement)
        connection.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, time.time()))
    timing = {"median_s": 2e-3, "spread_s": 1e-5, "trials": 50, "host_s": None}
    kernelbench = _schema_7(
        backend="cpp", rounds=3, timings={"candidate": timing}, shape_scale=0.5, per_round=[]
    )
    profile = {"instructions": 10, "hot_lines": [], "functions": []}
    cpp = _schema_7(cpp_profile=profile, backend="", rounds=0, timings={}, roofline=None)
    now = time.time()
    for run_id, kind, verdict in (("kb", "kernelbench", kernelbench), ("c", "cpp", cpp)):
        connection.execute(
            "INSERT INTO runs (run_id, created_at, updated_at, task_spec, task_name, task_kind,"
            " method, config_json, status, trace_json) VALUES (?, ?, ?, 'p', 'p', ?,"
            " 'best-of-n', '{}', 'done', '[]')",
            (run_id, now, now, kind),
        )
        connection.execute(
            "INSERT INTO evaluations VALUES (?, 'k', 'sha', 1.0, ?, 1.0, ?)",
            (run_id, json.dumps(verdict), now),
        )
    connection.execute(
        "INSERT INTO evaluations VALUES ('c', 'broken', 'sha', 1.0, '{not json', 1.0, ?)", (now,)
    )
    connection.close()

    store = RunStore(path)
    rows = dict(
        sqlite3.connect(path).execute("SELECT run_id || eval_key, feedback_json FROM evaluations")
    )
    stored = json.loads(rows["kbk"])
    assert stored["schema_version"] == 8 and "timings" not in stored and "rounds" not in stored
    assert stored["kernelbench"]["rounds"] == 3 and stored["kernelbench"]["shape_scale"] == 0.5
    assert stored["cpp"] is None
    plain = json.loads(rows["ck"])
    assert plain["kernelbench"] is None and plain["cpp"]["profile"]["instructions"] == 10
    assert rows["cbroken"] == "{not json"
    [verdict] = store.evaluations("kb")
    assert verdict.kernelbench is not None
    assert verdict.kernelbench.timings["candidate"].trials == 50
