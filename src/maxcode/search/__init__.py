"""The max-reward search: methods, the critic, value functions and the loop.

This is what a user may import to run or build a search: the settings (``SearchConfig``), a run
(``new_run``, ``run_search``) and what it returns (``RunSummary``), and the parts a custom loop
is made of (``Search``, ``Node``, ``Method``, the critics, ``ValueFunction``). Everything else
lives in the submodules (``maxcode.search.config``, ``.loop``, ``.observation``, ...) and may
change. The names load on first use, so that ``maxcode.search.config`` (what the command line
builds its options from) imports without the loop, the executors and the LLM providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maxcode.search.config import MAXCODE_PARTS, METHODS, PARTS, SearchConfig
    from maxcode.search.critique import Critic, LLMCritic, TemplateCritic
    from maxcode.search.driver import RunSummary, new_run, run_search, run_search_async
    from maxcode.search.loop import Search, SearchOutcome
    from maxcode.search.methods import Method, make_method
    from maxcode.search.tree import Node
    from maxcode.search.value import ValueFunction, make_value

_WHERE = {
    "Critic": "maxcode.search.critique",
    "LLMCritic": "maxcode.search.critique",
    "MAXCODE_PARTS": "maxcode.search.config",
    "METHODS": "maxcode.search.config",
    "Method": "maxcode.search.methods",
    "Node": "maxcode.search.tree",
    "PARTS": "maxcode.search.config",
    "RunSummary": "maxcode.search.driver",
    "Search": "maxcode.search.loop",
    "SearchConfig": "maxcode.search.config",
    "SearchOutcome": "maxcode.search.loop",
    "TemplateCritic": "maxcode.search.critique",
    "ValueFunction": "maxcode.search.value",
    "make_method": "maxcode.search.methods",
    "make_value": "maxcode.search.value",
    "new_run": "maxcode.search.driver",
    "run_search": "maxcode.search.driver",
    "run_search_async": "maxcode.search.driver",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'maxcode.search' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "MAXCODE_PARTS",
    "METHODS",
    "PARTS",
    "Critic",
    "LLMCritic",
    "Method",
    "Node",
    "RunSummary",
    "Search",
    "SearchConfig",
    "SearchOutcome",
    "TemplateCritic",
    "ValueFunction",
    "make_method",
    "make_value",
    "new_run",
    "run_search",
    "run_search_async",
]
