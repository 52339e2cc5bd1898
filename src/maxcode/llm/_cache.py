"""An opt-in response cache: identical requests at temperature 0 are answered from it.

The key is a sha256 over the provider, the model and every request parameter that shapes the
answer (messages, n, temperature, max_tokens, stop, options, reasoning effort). The endpoint
is not part of it: endpoints move between runs while the model name keeps naming the same
model. Timeouts, the purpose label and prompt-cache marks do not change an answer and are left
out too.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import TypeAdapter, ValidationError

from maxcode.home import cache_dir
from maxcode.llm._records import Completion, LLMRequest

CACHE_SCHEMA_VERSION = 1
"""Layout of cached values; entries of another version are ignored."""

_COMPLETIONS = TypeAdapter(list[Completion])


def cache_key(provider: str, model: str, request: LLMRequest) -> str:
    """The sha256 (hex) naming a request's answer in a cache."""
    identity = {
        "version": CACHE_SCHEMA_VERSION,
        "provider": provider,
        "model": model,
        "messages": [[message.role, message.content] for message in request.messages],
        "n": request.n,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stop": request.stop,
        "options": request.options,
    }
    if request.reasoning_effort is not None:  # only when set: older keys stay valid
        identity["reasoning_effort"] = request.reasoning_effort
    canonical = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@runtime_checkable
class ResponseCache(Protocol):
    """Stores the completions of a request under its key."""

    def get(self, key: str) -> list[Completion] | None:
        """The completions stored under ``key``, or None."""

    def put(self, key: str, completions: list[Completion]) -> None:
        """Store completions under ``key`` (replacing any)."""


class InMemoryResponseCache:
    """A response cache that lives as long as the process."""

    def __init__(self) -> None:
        self._entries: dict[str, list[Completion]] = {}

    def get(self, key: str) -> list[Completion] | None:
        """The completions stored under ``key``, or None."""
        entry = self._entries.get(key)
        return list(entry) if entry is not None else None

    def put(self, key: str, completions: list[Completion]) -> None:
        """Store completions under ``key``."""
        self._entries[key] = list(completions)

    def __len__(self) -> int:
        return len(self._entries)


class SQLiteResponseCache:
    """A response cache in one SQLite file (WAL mode), by default under ``cache_dir("llm")``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir("llm") / "responses.sqlite3"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
        with self._lock, self._connection:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY,"
                " schema_version INTEGER NOT NULL,"
                " completions TEXT NOT NULL,"
                " created_at REAL NOT NULL)"
            )

    def get(self, key: str) -> list[Completion] | None:
        """The completions stored under ``key``, or None (also for unreadable entries)."""
        with self._lock:
            row = self._connection.execute(
                "SELECT completions FROM responses WHERE key = ? AND schema_version = ?",
                (key, CACHE_SCHEMA_VERSION),
            ).fetchone()
        if row is None:
            return None
        try:
            return _COMPLETIONS.validate_json(row[0])
        except ValidationError:
            return None

    def put(self, key: str, completions: list[Completion]) -> None:
        """Store completions under ``key``."""
        payload = _COMPLETIONS.dump_json(completions).decode("utf-8")
        with self._lock, self._connection:
            self._connection.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)",
                (key, CACHE_SCHEMA_VERSION, payload, time.time()),
            )

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._connection.close()
