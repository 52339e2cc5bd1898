"""Executors: where evaluations run (``local`` by default)."""

from __future__ import annotations

from maxcode.errors import MaxcodeError
from maxcode.executors.base import EvalJob, Executor
from maxcode.executors.local import LocalExecutor

__all__ = ["EvalJob", "Executor", "LocalExecutor", "make_executor"]


def make_executor(name: str, workers: int = 1) -> Executor:
    """An executor by name."""
    if name == "local":
        return LocalExecutor(workers)
    if name == "ray":
        raise MaxcodeError("--executor ray is not available yet; use --executor local")
    raise MaxcodeError(f"unknown executor {name!r} (local or ray)")
