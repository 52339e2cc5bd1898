"""The run store: SQLite, WAL mode, append-only migrations."""

from __future__ import annotations

from pathlib import Path

from maxcode.config import maxcode_home
from maxcode.store.store import (
    STORE_SCHEMA_VERSION,
    BenchRecord,
    NodeRecord,
    RunRecord,
    RunStore,
    VoidResult,
)

__all__ = [
    "STORE_SCHEMA_VERSION",
    "BenchRecord",
    "NodeRecord",
    "RunRecord",
    "RunStore",
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
