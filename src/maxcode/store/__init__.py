"""The run store: SQLite, WAL mode, append-only migrations.

- ``migrations``: the schema, changed only by appending migrations
- ``lease``: who drives a run (process, host, heartbeat) and whether it still lives
- ``store``: ``RunStore``, the rows of every run, node, evaluation, critique and LLM call
"""

from __future__ import annotations

from pathlib import Path

from maxcode.home import maxcode_home
from maxcode.store.store import (
    STORE_SCHEMA_VERSION,
    BenchRecord,
    NodeRecord,
    RunDamaged,
    RunLeased,
    RunRecord,
    RunStore,
    StoreError,
    VoidResult,
)

__all__ = [
    "STORE_SCHEMA_VERSION",
    "BenchRecord",
    "NodeRecord",
    "RunDamaged",
    "RunLeased",
    "RunRecord",
    "RunStore",
    "StoreError",
    "VoidResult",
    "default_store_path",
    "open_store",
]


def default_store_path() -> Path:
    """``MAXCODE_HOME/maxcode.db``."""
    return maxcode_home() / "maxcode.db"


def open_store(path: str | Path | None = None) -> RunStore:
    """Open (creating when needed) the store at ``path`` or the default one."""
    return RunStore(path or default_store_path())
