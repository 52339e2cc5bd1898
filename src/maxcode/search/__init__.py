"""The max-reward search: methods, observation parts, the critic, and the loop."""

from maxcode.search.api import (
    RunSummary,
    new_run,
    resolve_isolation,
    run_isolation,
    run_search,
    run_search_async,
    summarize,
)
from maxcode.search.config import (
    ISOLATION_CHOICES,
    MAXCODE_PARTS,
    METHODS,
    PARTS,
    SearchConfig,
    load_config_file,
    make_config,
    parse_parts,
)
from maxcode.search.critique import Critic, LLMCritic, TemplateCritic
from maxcode.search.loop import Search, SearchOutcome, StepReport, normalised_key
from maxcode.search.methods import Expansion, Method, make_method
from maxcode.search.observation import ObservationPart, build_policy_prompt, describe_feedback
from maxcode.search.tree import Node
from maxcode.search.value import ValueFunction, make_value

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
    "make_config",
    "make_method",
    "make_value",
    "new_run",
    "normalised_key",
    "parse_parts",
    "resolve_isolation",
    "run_isolation",
    "run_search",
    "run_search_async",
    "summarize",
]
