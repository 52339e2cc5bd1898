"""Executors: where evaluations run (``local`` by default)."""

from __future__ import annotations

from maxcode.errors import MaxcodeError
from maxcode.executors.base import EvalJob, Executor
from maxcode.executors.local import LocalExecutor

__all__ = ["EvalJob", "Executor", "LocalExecutor", "make_executor"]


def make_executor(name: str, workers: int = 1, *, ray_address: str | None = None) -> Executor:
    """An executor by name: ``local`` (threads here) or ``ray`` (a local or remote cluster)."""
    if name == "local":
        return LocalExecutor(workers)
    if name == "ray":
        from maxcode.executors.ray_executor import RayExecutor

        # On Ray, --workers caps the evaluations in flight; by default the cluster's CPUs do.
        return RayExecutor(workers=workers if workers > 1 else None, address=ray_address)
    raise MaxcodeError(f"unknown executor {name!r} (local or ray)")
