"""The run store's schema, changed only by appending migrations (never by editing one)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable

from pydantic import ValidationError

from maxcode.types import FEEDBACK_SCHEMA_VERSION, Feedback


def _feedback_details(connection: sqlite3.Connection) -> None:
    """Verdicts stored in the layout of schema 7 or older, rewritten in schema 8's: their
    KernelBench-only keys under ``kernelbench``, ``cpp_profile`` as ``cpp.profile`` (as
    ``Feedback`` reads an older layout). A row that cannot be read is left as it is: reading
    it marks its run damaged."""
    for table in ("evaluations", "verifications"):
        rows = connection.execute(f"SELECT rowid, feedback_json FROM {table}").fetchall()
        for rowid, text in rows:
            try:
                raw = json.loads(text)
                if int(raw.get("schema_version", 0)) >= FEEDBACK_SCHEMA_VERSION:
                    continue
                upgraded = Feedback.model_validate(raw).model_dump_json()
            except (ValueError, TypeError, AttributeError, ValidationError):
                continue
            connection.execute(
                f"UPDATE {table} SET feedback_json = ? WHERE rowid = ?", (upgraded, rowid)
            )


Migration = str | Callable[[sqlite3.Connection], None]
"""SQL statements separated by ``;``, or a function that rewrites rows."""

MIGRATIONS: list[tuple[str, Migration]] = [
    (
        "m001_initial",
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            task_spec TEXT NOT NULL,
            task_name TEXT NOT NULL,
            task_kind TEXT NOT NULL,
            method TEXT NOT NULL,
            config_json TEXT NOT NULL,
            status TEXT NOT NULL,
            best_node_id TEXT,
            best_speedup REAL NOT NULL DEFAULT 1.0,
            steps_done INTEGER NOT NULL DEFAULT 0,
            trace_json TEXT NOT NULL DEFAULT '[]',
            message TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE candidates (
            sha256 TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            language TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE nodes (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            node_id TEXT NOT NULL,
            parent_id TEXT,
            depth INTEGER NOT NULL,
            step INTEGER NOT NULL,
            candidate_sha256 TEXT REFERENCES candidates(sha256),
            observation_parts TEXT NOT NULL,
            prompt_call TEXT,
            completion TEXT NOT NULL DEFAULT '',
            value_score REAL,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, node_id)
        );
        CREATE TABLE evaluations (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            eval_key TEXT NOT NULL,
            candidate_sha256 TEXT NOT NULL,
            reward REAL NOT NULL,
            feedback_json TEXT NOT NULL,
            seconds REAL NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, eval_key)
        );
        CREATE TABLE critiques (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            node_id TEXT NOT NULL,
            text TEXT NOT NULL,
            critic TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, node_id)
        );
        CREATE TABLE llm_calls (
            call_id TEXT PRIMARY KEY,
            run_id TEXT,
            purpose TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            call_json TEXT NOT NULL,
            ok INTEGER NOT NULL,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            cost_usd REAL,
            latency_s REAL NOT NULL,
            cached INTEGER NOT NULL,
            created_at REAL NOT NULL,
            schema_version INTEGER NOT NULL
        );
        CREATE INDEX llm_calls_by_run ON llm_calls(run_id, purpose);
        CREATE INDEX nodes_by_run ON nodes(run_id, step);
        """,
    ),
    (
        "m002_benches",
        """
        CREATE TABLE benches (
            bench_id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            config_json TEXT NOT NULL,
            tasks_json TEXT NOT NULL,
            labels_json TEXT NOT NULL,
            trials INTEGER NOT NULL
        );
        ALTER TABLE runs ADD COLUMN bench_id TEXT;
        ALTER TABLE runs ADD COLUMN bench_label TEXT;
        ALTER TABLE runs ADD COLUMN bench_trial INTEGER;
        CREATE INDEX runs_by_bench ON runs(bench_id)
        """,
    ),
    (
        "m003_verifications",
        """
        CREATE TABLE verifications (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            node_id TEXT NOT NULL,
            candidate_sha256 TEXT NOT NULL,
            correct INTEGER NOT NULL,
            speedup REAL NOT NULL,
            feedback_json TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, node_id)
        )
        """,
    ),
    (
        "m004_isolation",
        """
        ALTER TABLE runs ADD COLUMN isolation TEXT NOT NULL DEFAULT '';
        ALTER TABLE runs ADD COLUMN unsafe_isolation INTEGER NOT NULL DEFAULT 0
        """,
    ),
    (
        "m005_run_lease",
        """
        CREATE TABLE run_leases (
            run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            process_start TEXT NOT NULL DEFAULT '',
            taken_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL
        )
        """,
    ),
    ("m006_feedback_details", _feedback_details),
]


def migrate(connection: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded, in order; returns the names applied."""
    connection.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    applied = {row[0] for row in connection.execute("SELECT name FROM schema_migrations")}
    done = []
    for name, script in MIGRATIONS:
        if name in applied:
            continue
        # BEGIN IMMEDIATE: two processes opening a new store at once apply each migration once.
        connection.execute("BEGIN IMMEDIATE")
        try:
            if connection.execute(
                "SELECT 1 FROM schema_migrations WHERE name = ?", (name,)
            ).fetchone():
                connection.execute("COMMIT")
                continue
            if callable(script):
                script(connection)
            else:
                for statement in script.split(";"):
                    if statement.strip():
                        connection.execute(statement)
            connection.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (name, time.time()),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        done.append(name)
    return done
