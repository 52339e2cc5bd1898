"""maxcode: make programs faster by LLM search guided by execution feedback.

``maxcode.evaluate``, ``maxcode.optimize``, ``maxcode.bench``, ``maxcode.regions`` and
``maxcode.load_task`` are the commands as functions (``maxcode.api``); the records they take
and return load on first use, so ``import maxcode`` stays light."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from maxcode.api import bench, evaluate, load_task, optimize, regions
    from maxcode.errors import MaxcodeError
    from maxcode.harness.settings import EvalRequest, EvalSettings
    from maxcode.search.config import SearchConfig
    from maxcode.search.driver import RunSummary
    from maxcode.tasks import Task
    from maxcode.types import Feedback

_WHERE = {
    "bench": "maxcode.api",
    "evaluate": "maxcode.api",
    "load_task": "maxcode.api",
    "optimize": "maxcode.api",
    "regions": "maxcode.api",
    "MaxcodeError": "maxcode.errors",
    "EvalRequest": "maxcode.harness.settings",
    "EvalSettings": "maxcode.harness.settings",
    "RunSummary": "maxcode.search.driver",
    "SearchConfig": "maxcode.search.config",
    "Task": "maxcode.tasks",
    "Feedback": "maxcode.types",
}

__all__ = [
    "EvalRequest",
    "EvalSettings",
    "Feedback",
    "MaxcodeError",
    "RunSummary",
    "SearchConfig",
    "Task",
    "__version__",
    "bench",
    "evaluate",
    "load_task",
    "optimize",
    "regions",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'maxcode' has no attribute {name!r}")
