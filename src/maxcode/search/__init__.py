"""The max-reward search: methods, observation parts, the critic, and the loop.

The names below load on first use, so that ``maxcode.search.config`` (what the command line
builds its options from) imports without the loop, the executors and the LLM providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maxcode.evaluate.sandbox import ISOLATION_CHOICES
    from maxcode.search.api import (
        RunSummary,
        new_run,
        resolve_isolation,
        run_search,
        run_search_async,
        summarize,
    )
    from maxcode.search.config import (
        MAXCODE_PARTS,
        METHODS,
        PARTS,
        SearchConfig,
        load_config_file,
        make_config,
        parse_parts,
    )
    from maxcode.search.critique import Critic, LLMCritic, TemplateCritic
    from maxcode.search.loop import Search, SearchOutcome, StepReport
    from maxcode.search.methods import Expansion, Method, make_method
    from maxcode.search.observation import ObservationPart, build_policy_prompt, describe_feedback
    from maxcode.search.results import RunResult, run_isolation, run_result
    from maxcode.search.tree import Node, load_tree, normalised_key
    from maxcode.search.value import ValueFunction, make_value

_WHERE = {
    "Critic": "maxcode.search.critique",
    "Expansion": "maxcode.search.methods",
    "ISOLATION_CHOICES": "maxcode.evaluate.sandbox",
    "LLMCritic": "maxcode.search.critique",
    "MAXCODE_PARTS": "maxcode.search.config",
    "METHODS": "maxcode.search.config",
    "Method": "maxcode.search.methods",
    "Node": "maxcode.search.tree",
    "load_tree": "maxcode.search.tree",
    "ObservationPart": "maxcode.search.observation",
    "PARTS": "maxcode.search.config",
    "RunSummary": "maxcode.search.api",
    "Search": "maxcode.search.loop",
    "SearchConfig": "maxcode.search.config",
    "SearchOutcome": "maxcode.search.loop",
    "StepReport": "maxcode.search.loop",
    "TemplateCritic": "maxcode.search.critique",
    "ValueFunction": "maxcode.search.value",
    "build_policy_prompt": "maxcode.search.observation",
    "describe_feedback": "maxcode.search.observation",
    "load_config_file": "maxcode.search.config",
    "make_config": "maxcode.search.config",
    "make_method": "maxcode.search.methods",
    "make_value": "maxcode.search.value",
    "new_run": "maxcode.search.api",
    "normalised_key": "maxcode.search.tree",
    "parse_parts": "maxcode.search.config",
    "resolve_isolation": "maxcode.search.api",
    "run_isolation": "maxcode.search.results",
    "run_search": "maxcode.search.api",
    "RunResult": "maxcode.search.results",
    "run_result": "maxcode.search.results",
    "run_search_async": "maxcode.search.api",
    "summarize": "maxcode.search.api",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'maxcode.search' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ISOLATION_CHOICES",
    "MAXCODE_PARTS",
    "METHODS",
    "PARTS",
    "Critic",
    "Expansion",
    "LLMCritic",
    "Method",
    "Node",
    "ObservationPart",
    "RunResult",
    "RunSummary",
    "Search",
    "SearchConfig",
    "SearchOutcome",
    "StepReport",
    "TemplateCritic",
    "ValueFunction",
    "build_policy_prompt",
    "describe_feedback",
    "load_config_file",
    "load_tree",
    "make_config",
    "make_method",
    "make_value",
    "new_run",
    "normalised_key",
    "parse_parts",
    "resolve_isolation",
    "run_isolation",
    "run_result",
    "run_search",
    "run_search_async",
    "summarize",
]
