"""The run store: one SQLite file holding every run, node, candidate, evaluation, critique and
LLM call. Every write is committed at once, so a run killed at any moment loses at most the
work in flight, and ``--resume`` replays the rest from here."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.errors import MaxcodeError
from maxcode.harness.integrity import apply_policy
from maxcode.llm import LLMCall
from maxcode.store.lease import Lease, process_start, this_host
from maxcode.store.migrations import migrate
from maxcode.types import Feedback

STORE_SCHEMA_VERSION = 1


class StoreError(MaxcodeError):
    """The store cannot be read or written (a damaged page, a full disk, a read-only file)."""


class RunDamaged(MaxcodeError):
    """A row of one run cannot be read; the other runs stay readable."""


class RunLeased(MaxcodeError):
    """Another live process drives the run."""


@dataclass(frozen=True)
class RunRecord:
    """One search run as stored."""

    run_id: str
    """Short unique id."""
    created_at: float
    """Unix time the run started."""
    task_spec: str
    """The task as the user named it (folder, file, or FILE.jsonl#N)."""
    task_name: str
    """The task's name."""
    task_kind: str
    """cpp or kernelbench."""
    method: str
    """Search method."""
    config: dict[str, Any]
    """The full search configuration."""
    status: str
    """running, done, stopped (interrupted, budget spent) or failed."""
    best_node_id: str | None
    """The node with the highest reward (None: the reference is still the best)."""
    best_speedup: float
    """The highest reward seen (1.0: nothing beat the reference)."""
    steps_done: int
    """Search steps completed."""
    trace: list[float]
    """Best reward after each completed step."""
    message: str
    """Why the run stopped, when it did not simply finish."""
    bench_id: str | None = None
    """The bench the run belongs to, if any."""
    bench_label: str | None = None
    """The method label the bench ran it under (``cuda-llm+maxcode``)."""
    bench_trial: int | None = None
    """Which repetition of (task, method) it is within its bench."""
    isolation: str = ""
    """The sandbox level its candidates run under (empty: a run stored before it was kept)."""
    unsafe_isolation: bool = False
    """The user accepted a level that cannot keep expected outputs private (``rlimits``)."""


@dataclass(frozen=True)
class BenchRecord:
    """A bench: every listed method on every task of a suite."""

    bench_id: str
    """Short unique id."""
    created_at: float
    """Unix time it started."""
    config: dict[str, Any]
    """Search settings shared by every run."""
    tasks: list[str]
    """Task specs, in order."""
    labels: list[str]
    """Method labels, in order."""
    trials: int
    """Runs per (task, method)."""


@dataclass(frozen=True)
class VoidResult:
    """An evaluation whose reward a void finding of the integrity policy took."""

    node_id: str | None
    """The first node that proposed the program (None: not found)."""
    reason: str
    """The void finding, ``"category: message"``."""
    claimed_speedup: float | None
    """What the program measured before the finding took it."""
    isolation: str
    """The sandbox level it ran under."""

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "reason": self.reason,
            "claimed_speedup": self.claimed_speedup,
            "isolation": self.isolation,
        }


@dataclass(frozen=True)
class NodeRecord:
    """One proposal in a run's search tree."""

    node_id: str
    """Id within the run, ``<step>.<index>``; the root (the reference) is ``0``."""
    parent_id: str | None
    """The node it was proposed from."""
    depth: int
    """Distance from the root."""
    step: int
    """Search step that proposed it."""
    candidate_sha256: str | None
    """The program proposed (None: the answer held no code)."""
    observation_parts: str
    """Observation parts the policy saw, comma-separated."""
    prompt_call: str | None
    """Purpose key of the policy call that proposed it."""
    completion: str
    """The policy's full answer."""
    value_score: float | None = None
    """The value function's score, when one ranked it."""


class _RunCallLog:
    """The ``CallLog`` of one run: every LLM call goes into the store under the run's id."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def record(self, call: LLMCall) -> None:
        self.store.record_call(self.run_id, call)


def _enter_wal(connection: sqlite3.Connection, patience_s: float = 30.0) -> None:
    """Switch to WAL mode. Two processes creating the same store at once can get "database is
    locked" here without SQLite's busy handler waiting (the switch needs the file to itself),
    so wait and try again."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _writable(path: Path) -> bool:
    """The store at ``path`` can be written (WAL needs its folder writable too)."""
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return True


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection; a WAL store in a folder it cannot write is read as immutable."""
    connection = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, timeout=30.0, isolation_level=None,
        check_same_thread=False,
    )  # fmt: skip
    try:
        connection.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return connection
    except sqlite3.OperationalError:
        connection.close()
    return sqlite3.connect(
        f"file:{path}?immutable=1", uri=True, isolation_level=None, check_same_thread=False
    )


class _Fetched:
    """A query's rows, read in full while the store's error handling applies."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


class RunStore:
    """A SQLite file (WAL mode) that several processes may share. A store this process cannot
    write is opened read-only (no WAL switch, no migration): it can be listed and reported."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.read_only = not _writable(self.path)
        try:
            if self.read_only:
                self._connection = _open_read_only(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._connection = sqlite3.connect(
                    self.path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
                self._connection.execute("PRAGMA busy_timeout=30000")
                _enter_wal(self._connection)
                self._connection.execute("PRAGMA foreign_keys=ON")
                migrate(self._connection)
            applied = {
                row[0] for row in self._connection.execute("SELECT name FROM schema_migrations")
            }
        except (sqlite3.Error, OSError) as error:
            raise StoreError(f"cannot open the run store {self.path}: {error}") from None
        self._lock = threading.Lock()
        # A read-only store made before the lease existed has no run driven from it.
        self._has_leases = "m005_run_lease" in applied

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def _execute(self, sql: str, parameters: tuple[Any, ...] = ()) -> _Fetched:
        with self._lock:
            try:
                return _Fetched(self._connection.execute(sql, parameters).fetchall())
            except sqlite3.Error as error:
                raise StoreError(f"run store {self.path}: {error}") from None

    # --- runs ------------------------------------------------------------------------------

    def create_run(
        self, run_id: str, task_spec: str, task_name: str, task_kind: str, method: str,
        config: dict[str, Any], *, status: str = "running", bench_id: str | None = None,
        bench_label: str | None = None, bench_trial: int | None = None,
        isolation: str | None = None, unsafe_isolation: bool | None = None,
    ) -> None:  # fmt: skip
        """Record a new run (``isolation`` and ``unsafe_isolation`` default to the config's)."""
        now = time.time()
        if isolation is None:
            isolation = str(config.get("isolation") or "")
        if unsafe_isolation is None:
            unsafe_isolation = bool(config.get("unsafe_isolation", False))
        self._execute(
            "INSERT INTO runs (run_id, created_at, updated_at, task_spec, task_name, task_kind,"
            " method, config_json, status, bench_id, bench_label, bench_trial, isolation,"
            " unsafe_isolation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id, now, now, task_spec, task_name, task_kind, method, json.dumps(config),
                status, bench_id, bench_label, bench_trial, isolation, int(unsafe_isolation),
            ),
        )  # fmt: skip

    def create_bench(
        self,
        bench_id: str,
        config: dict[str, Any],
        tasks: list[str],
        labels: list[str],
        trials: int,
    ) -> None:
        """Record a new bench."""
        self._execute(
            "INSERT INTO benches (bench_id, created_at, config_json, tasks_json, labels_json,"
            " trials) VALUES (?, ?, ?, ?, ?, ?)",
            (
                bench_id,
                time.time(),
                json.dumps(config),
                json.dumps(tasks),
                json.dumps(labels),
                trials,
            ),
        )

    def set_bench_config(self, bench_id: str, config: dict[str, Any]) -> None:
        """Replace a bench's stored settings (``regions``: its model's outcome, once judged)."""
        self._execute(
            "UPDATE benches SET config_json = ? WHERE bench_id = ?", (json.dumps(config), bench_id)
        )

    def get_bench(self, bench_id: str) -> BenchRecord | None:
        """A bench by id: the exact id, or a unique prefix of it (never a pattern)."""
        rows = self._execute(
            "SELECT bench_id, created_at, config_json, tasks_json, labels_json, trials FROM benches"
            " WHERE substr(bench_id, 1, length(?)) = ?",
            (bench_id, bench_id),
        ).fetchall()
        if len(rows) > 1 and not any(row[0] == bench_id for row in rows):
            raise MaxcodeError(f"bench id {bench_id!r} is ambiguous")
        rows = [row for row in rows if row[0] == bench_id] or rows
        if not bench_id or not rows:
            return None
        bench, created, config, tasks, labels, trials = rows[0]
        try:
            return BenchRecord(
                bench, created, json.loads(config), json.loads(tasks), json.loads(labels), trials
            )
        except ValueError as error:
            raise RunDamaged(f"bench {bench}: its row cannot be read ({error})") from None

    def bench_runs(self, bench_id: str) -> list[RunRecord]:
        """The runs of a bench, in the order they were created."""
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE bench_id = ? ORDER BY created_at, rowid",
            (bench_id,),
        ).fetchall()
        return [self._with_driver(_run(row)) for row in rows]

    def evaluations(self, run_id: str) -> list[Feedback]:
        """A run's verdicts, in the order they were recorded, judged by today's policy."""
        rows = self._execute(
            "SELECT feedback_json FROM evaluations WHERE run_id = ? ORDER BY created_at, rowid",
            (run_id,),
        ).fetchall()
        return [_load_feedback(row[0], run_id, "evaluations") for row in rows]

    def void_results(self, run_id: str) -> list[VoidResult]:
        """The run's evaluations that a void finding took the reward of, with the first node
        that proposed each program, in the order they were recorded."""
        rows = self._execute(
            "SELECT e.feedback_json, (SELECT n.node_id FROM nodes n WHERE n.run_id = e.run_id"
            " AND n.candidate_sha256 = e.candidate_sha256 ORDER BY n.step, n.created_at,"
            " n.node_id LIMIT 1) FROM evaluations e WHERE e.run_id = ?"
            " ORDER BY e.created_at, e.rowid",
            (run_id,),
        ).fetchall()
        found = []
        for feedback_json, node_id in rows:
            feedback = _load_feedback(feedback_json, run_id, "evaluations")
            if feedback.suspect is not None:
                found.append(
                    VoidResult(
                        node_id=node_id,
                        reason=feedback.suspect,
                        claimed_speedup=feedback.claimed_speedup,
                        isolation=feedback.isolation,
                    )
                )
        return found

    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by id: the exact id, or a unique prefix of it (never a pattern)."""
        if not run_id:
            return None
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE substr(run_id, 1, length(?)) = ?"
            " ORDER BY created_at",
            (run_id, run_id),
        ).fetchall()
        exact = [row for row in rows if row[0] == run_id]
        if exact:
            return self._with_driver(_run(exact[0]))
        if len(rows) > 1:
            raise MaxcodeError(f"run id {run_id!r} is ambiguous: {len(rows)} runs start with it")
        return self._with_driver(_run(rows[0])) if rows else None

    def list_runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        rows = self._execute(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at").fetchall()
        return [self._with_driver(_run(row)) for row in rows]

    # --- the driver's lease --------------------------------------------------------------------

    def lease(self, run_id: str) -> Lease | None:
        """The lease of the process that drives (or last drove) the run."""
        if not self._has_leases:
            return None
        row = self._execute(
            "SELECT pid, host, process_start, heartbeat_at FROM run_leases WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return Lease(*row) if row else None

    def take_lease(self, run_id: str) -> Lease | None:
        """Become the run's one driver; returns the lease of a driver that is gone (None: there
        was none). Raises ``RunLeased`` (exit 2) naming the live process that drives it."""
        if self.read_only:
            raise StoreError(f"the run store {self.path} is read-only: no run can be driven")
        now = time.time()
        with self._lock:
            connection = self._connection
            try:
                # BEGIN IMMEDIATE: of two processes taking the lease at once, one waits and
                # then sees the other's.
                connection.execute("BEGIN IMMEDIATE")
                try:
                    row = connection.execute(
                        "SELECT pid, host, process_start, heartbeat_at FROM run_leases"
                        " WHERE run_id = ?",
                        (run_id,),
                    ).fetchone()
                    held = Lease(*row) if row else None
                    if held is not None and not held.mine() and held.alive():
                        connection.execute("ROLLBACK")
                        raise RunLeased(
                            f"run {run_id} is being driven by {held.describe()}"
                            f" (heartbeat {max(0.0, now - held.heartbeat_at):.0f} s ago);"
                            " wait for it to end or stop it first"
                        )
                    connection.execute(
                        "INSERT OR REPLACE INTO run_leases (run_id, pid, host, process_start,"
                        " taken_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)",
                        (run_id, os.getpid(), this_host(), process_start(os.getpid()), now, now),
                    )
                    connection.execute("COMMIT")
                except sqlite3.Error:
                    connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise StoreError(f"run store {self.path}: {error}") from None
        return held if held is not None and not held.mine() else None

    def renew_lease(self, run_id: str) -> None:
        """The driver's heartbeat."""
        self._execute(
            "UPDATE run_leases SET heartbeat_at = ? WHERE run_id = ? AND pid = ? AND host = ?",
            (time.time(), run_id, os.getpid(), this_host()),
        )

    def release_lease(self, run_id: str) -> None:
        """Stop driving the run."""
        self._execute(
            "DELETE FROM run_leases WHERE run_id = ? AND pid = ? AND host = ?",
            (run_id, os.getpid(), this_host()),
        )

    def _with_driver(self, record: RunRecord) -> RunRecord:
        """A run stored as running whose driver is gone (killed, the host restarted) is
        ``stopped``: interrupted, and it resumes."""
        if record.status != "running":
            return record
        lease = self.lease(record.run_id)
        if lease is None or lease.alive():
            return record
        return replace(
            record,
            status="stopped",
            message=f"interrupted: its driver ({lease.describe()}) is gone; resume with --resume",
        )

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Change a run's status, best, steps done, trace or message."""
        columns = {"status", "best_node_id", "best_speedup", "steps_done", "message"}
        assignments: list[str] = ["updated_at = ?"]
        values: list[Any] = [time.time()]
        for name, value in fields.items():
            if name == "trace":
                assignments.append("trace_json = ?")
                values.append(json.dumps(value))
            elif name in columns:
                assignments.append(f"{name} = ?")
                values.append(value)
            else:
                raise ValueError(f"unknown run field {name}")
        values.append(run_id)
        self._execute(f"UPDATE runs SET {', '.join(assignments)} WHERE run_id = ?", tuple(values))

    # --- candidates and nodes ------------------------------------------------------------------

    def put_candidate(self, source: str, language: str) -> str:
        """Store a program by its content hash; returns the hash."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        self._execute(
            "INSERT OR IGNORE INTO candidates (sha256, source, language, created_at)"
            " VALUES (?, ?, ?, ?)",
            (digest, source, language, time.time()),
        )
        return digest

    def get_candidate(self, digest: str) -> str:
        """A program's source by its hash."""
        row = self._execute("SELECT source FROM candidates WHERE sha256 = ?", (digest,)).fetchone()
        if row is None:
            raise KeyError(digest)
        return str(row[0])

    def put_node(self, run_id: str, node: NodeRecord) -> None:
        """Record a node (a node already recorded under its id is kept as it was)."""
        self._execute(
            "INSERT OR IGNORE INTO nodes (run_id, node_id, parent_id, depth, step,"
            " candidate_sha256, observation_parts, prompt_call, completion, value_score,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id, node.node_id, node.parent_id, node.depth, node.step,
                node.candidate_sha256, node.observation_parts, node.prompt_call,
                node.completion, node.value_score, time.time(),
            ),
        )  # fmt: skip

    def nodes(self, run_id: str) -> list[NodeRecord]:
        """A run's nodes, in the order they were proposed."""
        rows = self._execute(
            "SELECT node_id, parent_id, depth, step, candidate_sha256, observation_parts,"
            " prompt_call, completion, value_score FROM nodes WHERE run_id = ?"
            " ORDER BY step, created_at, node_id",
            (run_id,),
        ).fetchall()
        return [NodeRecord(*row) for row in rows]

    # --- evaluations and critiques -----------------------------------------------------------

    def put_evaluation(
        self, run_id: str, eval_key: str, candidate_sha256: str, feedback: Feedback, seconds: float
    ) -> None:
        """Record what the harness said of a candidate (once: a second evaluation of the same
        key is a bug of the caller, and fails loudly)."""
        self._execute(
            "INSERT INTO evaluations (run_id, eval_key, candidate_sha256, reward,"
            " feedback_json, seconds, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run_id, eval_key, candidate_sha256, feedback.reward,
                feedback.model_dump_json(), seconds, time.time(),
            ),
        )  # fmt: skip

    def get_evaluation(self, run_id: str, eval_key: str) -> Feedback | None:
        """A recorded evaluation, if there is one."""
        row = self._execute(
            "SELECT feedback_json FROM evaluations WHERE run_id = ? AND eval_key = ?",
            (run_id, eval_key),
        ).fetchone()
        return _load_feedback(row[0], run_id, "evaluations") if row else None

    def put_verification(self, run_id: str, node_id: str, feedback: Feedback) -> None:
        """Record the final re-verification of a node's program (once per node)."""
        self._execute(
            "INSERT INTO verifications (run_id, node_id, candidate_sha256, correct, speedup,"
            " feedback_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                node_id,
                feedback.candidate_sha256,
                int(feedback.correct and feedback.suspect is None),
                feedback.speedup,
                feedback.model_dump_json(),
                time.time(),
            ),
        )

    def verifications(self, run_id: str) -> list[tuple[str, Feedback]]:
        """The run's re-verifications, (node id, verdict), in the order they were made."""
        rows = self._execute(
            "SELECT node_id, feedback_json FROM verifications WHERE run_id = ?"
            " ORDER BY created_at, rowid",
            (run_id,),
        ).fetchall()
        return [(row[0], _load_feedback(row[1], run_id, "verifications")) for row in rows]

    def count_evaluations(self, run_id: str) -> int:
        """Evaluations recorded for a run."""
        row = self._execute("SELECT COUNT(*) FROM evaluations WHERE run_id = ?", (run_id,))
        return int(row.fetchone()[0])

    def put_critique(self, run_id: str, node_id: str, text: str, critic: str) -> None:
        """Record the critic's diagnosis of a node."""
        self._execute(
            "INSERT INTO critiques (run_id, node_id, text, critic, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (run_id, node_id, text, critic, time.time()),
        )

    def get_critique(self, run_id: str, node_id: str) -> str | None:
        """A node's recorded critique, if there is one."""
        row = self._execute(
            "SELECT text FROM critiques WHERE run_id = ? AND node_id = ?", (run_id, node_id)
        ).fetchone()
        return str(row[0]) if row else None

    # --- LLM calls -------------------------------------------------------------------------

    def call_log(self, run_id: str) -> _RunCallLog:
        """The ``CallLog`` that records a run's calls here."""
        return _RunCallLog(self, run_id)

    def record_call(self, run_id: str | None, call: LLMCall) -> None:
        """Record one LLM call, successful or not."""
        self._execute(
            "INSERT OR IGNORE INTO llm_calls (call_id, run_id, purpose, provider, model, call_json,"
            " ok, prompt_tokens, completion_tokens, cost_usd, latency_s, cached, created_at,"
            " schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                call.call_id, run_id, call.purpose, call.provider, call.model,
                call.model_dump_json(), call.error is None, call.prompt_tokens,
                call.completion_tokens, call.cost_usd, call.latency_s, call.cached,
                call.timestamp, call.schema_version,
            ),
        )  # fmt: skip

    def find_call(self, run_id: str, purpose: str) -> LLMCall | None:
        """The successful call a run made for ``purpose`` (what ``--resume`` replays)."""
        row = self._execute(
            "SELECT call_json FROM llm_calls WHERE run_id = ? AND purpose = ? AND ok = 1"
            " ORDER BY created_at LIMIT 1",
            (run_id, purpose),
        ).fetchone()
        if row is None:
            return None
        try:
            return LLMCall.model_validate_json(row[0])
        except ValueError as error:
            raise RunDamaged(
                f"run {run_id}: a row of llm_calls cannot be read ({_reason(error)})"
            ) from None

    def usage(self, run_id: str) -> dict[str, Any]:
        """Calls, tokens and cost of a run (cost None when any call's price was unknown); of
        the prompt tokens, those a provider's prompt cache served; of the completion tokens,
        those spent reasoning (both from the calls' records, 0 where unreported)."""
        row = self._execute(
            "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),"
            " COALESCE(SUM(cost_usd), 0), SUM(cost_usd IS NULL),"
            " COALESCE(SUM(json_extract(call_json, '$.cached_prompt_tokens')), 0),"
            " COALESCE(SUM(json_extract(call_json, '$.reasoning_tokens')), 0)"
            " FROM llm_calls WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        calls, prompt, completion, cost, unknown, cached, reasoning = row
        return {
            "llm_calls": int(calls),
            "prompt_tokens": int(prompt),
            "completion_tokens": int(completion),
            "cost_usd": None if unknown else float(cost),
            "cached_prompt_tokens": int(cached),
            "reasoning_tokens": int(reasoning),
        }


_RUN_COLUMNS = (
    "run_id, created_at, task_spec, task_name, task_kind, method, config_json, status,"
    " best_node_id, best_speedup, steps_done, trace_json, message, bench_id, bench_label,"
    " bench_trial, isolation, unsafe_isolation"
)


def _reason(error: Exception) -> str:
    """An unreadable row's reason in one line."""
    if isinstance(error, ValidationError):
        return "; ".join(str(detail["msg"]) for detail in error.errors()[:2])
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _load_feedback(text: str, run_id: str, table: str) -> Feedback:
    """A stored verdict, judged by today's integrity table: a verdict stored before the policy
    (schema 3 and older, no ``suspect``) whose flags now void it comes back suspect. A row that
    cannot be read raises ``RunDamaged`` naming its run."""
    try:
        return apply_policy(Feedback.model_validate_json(text))
    except ValueError as error:
        raise RunDamaged(
            f"run {run_id}: a row of {table} cannot be read ({_reason(error)})"
        ) from None


def _run(row: tuple[Any, ...]) -> RunRecord:
    fields = dict(zip([name.strip() for name in _RUN_COLUMNS.split(",")], row))
    status, message = fields["status"], fields["message"]
    try:
        config = json.loads(fields["config_json"])
        trace = json.loads(fields["trace_json"])
    except (TypeError, ValueError) as error:
        # Listed as damaged, with the reason; the other runs stay readable.
        config, trace = {}, []
        status, message = "damaged", f"its row in runs cannot be read ({_reason(error)})"
    return RunRecord(
        run_id=fields["run_id"],
        created_at=fields["created_at"],
        task_spec=fields["task_spec"],
        task_name=fields["task_name"],
        task_kind=fields["task_kind"],
        method=fields["method"],
        config=config,
        status=status,
        best_node_id=fields["best_node_id"],
        best_speedup=fields["best_speedup"],
        steps_done=fields["steps_done"],
        trace=trace,
        message=message,
        bench_id=fields["bench_id"],
        bench_label=fields["bench_label"],
        bench_trial=fields["bench_trial"],
        isolation=fields["isolation"] or "",
        unsafe_isolation=bool(fields["unsafe_isolation"]),
    )
