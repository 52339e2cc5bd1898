"""The settings of a search: one record, from flags, ``MAXCODE_*`` variables or a YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from maxcode.errors import MaxcodeError
from maxcode.harness.settings import EvalSettings, validated
from maxcode.llm._records import DEFAULT_REQUEST_TIMEOUT_S

MethodName = Literal["best-of-n", "effi-learner", "cuda-llm", "beam", "tree"]
METHODS: tuple[str, ...] = ("best-of-n", "effi-learner", "cuda-llm", "beam", "tree")
PARTS: tuple[str, ...] = ("feedback", "trajectory", "critique", "best")
MAXCODE_PARTS: tuple[str, ...] = ("trajectory", "critique", "best")
"""The observation of the MaxCode variant of every method (``--maxcode``)."""


class SearchConfig(EvalSettings):
    """Everything that decides what a search does, its evaluations' settings included (their
    record, ``EvalSettings``, is the base); stored with the run."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    method: MethodName = "cuda-llm"
    """How the tree grows."""
    observation: list[str] | None = None
    """Observation parts the policy sees; None for the method's own default."""
    depth: int = Field(default=8, ge=1)
    """Search steps (best-of-n always takes one)."""
    candidates: int = Field(default=8, ge=1)
    """Candidates the policy writes per expanded node (k; n for best-of-n)."""
    beam_width: int = Field(default=2, ge=1)
    """Nodes kept per level by ``beam``."""
    max_evals: int | None = Field(default=None, ge=1)
    """Stop after this many evaluations (identical candidates count once)."""
    patience: int | None = Field(default=None, ge=1)
    """Stop early after this many steps in a row without a better best program."""
    target: float | None = Field(default=None, gt=0)
    """Stop early once the best speedup reaches this."""
    model: str = "rules"
    """The policy, ``provider/model``; ``rules`` is the offline proposer."""
    critic_model: str | None = None
    """The critic, ``provider/model``; None for the policy's model."""
    base_url: str | None = None
    """Endpoint for OpenAI-compatible providers (not stored as part of the run's identity)."""
    metric: Literal["wall", "instructions"] = "wall"
    """The cost the reward is measured in: wall time, or callgrind's instruction count
    (deterministic)."""
    verify: bool = True
    """When the run ends, judge its best program again (fresh processes and inputs) before it
    is reported; when that fails, the next best is tried."""

    def profiling(self) -> bool:
        """Whether evaluations collect profiles: ``profile`` when set, else when an LLM critic
        reads them."""
        if self.profile is not None:
            return self.profile
        return (self.critic_model or self.model) != "rules"

    def evaluation(self, profile: bool | None = None) -> EvalSettings:
        """The settings each of the search's evaluations runs with (``profile`` None: as
        ``profiling`` says)."""
        settings = self.model_dump(include=set(EvalSettings.model_fields))
        settings["profile"] = self.profiling() if profile is None else profile
        return EvalSettings.model_validate(settings)

    temperature: float = Field(default=0.7, ge=0)
    """Sampling temperature of the policy."""
    max_tokens: int = Field(default=4096, ge=1)
    """Output limit of each policy and critic answer."""
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    """How hard a reasoning model thinks, apart from --max-tokens (docs/models.md: per provider)."""
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    """Seconds a model may stay silent (before or within a streamed answer); then the call fails."""
    prompt_cache: bool = True
    """Mark the stable start of prompts (task, reference) for the provider's prompt cache."""
    trajectory_tokens: int = Field(default=6000, ge=0)
    """Budget of the trajectory part of a prompt, in tokens (about 4 characters each)."""
    workers: int = Field(default=1, ge=1)
    """Evaluations run at once (each pins its timed runs to its own CPU)."""
    executor: Literal["local", "ray"] = "local"
    """Where evaluations run."""
    ray_address: str | None = None
    """Ray cluster to join (``--executor ray``); None: ``RAY_ADDRESS``, else a local instance."""
    concurrency: int = Field(default=1, ge=1)
    """Searches a bench (or ``--regions``) runs at once, sharing the ``workers`` slots."""
    value: str = "none"
    """Action-value function ranking candidates before they run: ``none``, ``rtg:DIR`` or
    ``rtg:provider/model``."""
    proposals: int | None = Field(default=None, ge=1)
    """Candidates the policy writes per expansion when a value function ranks them (m > k;
    default 2k); only the top k are evaluated."""
    max_usd: float | None = Field(default=None, gt=0)
    """Stop when LLM spending would pass this many dollars."""
    max_llm_tokens: int | None = Field(default=None, ge=1)
    """Stop when LLM tokens would pass this many."""
    max_llm_calls: int | None = Field(default=None, ge=1)
    """Stop after this many LLM calls."""

    @field_validator("observation")
    @classmethod
    def _known_parts(cls, parts: list[str] | None) -> list[str] | None:
        if parts is None:
            return None
        unknown = [part for part in parts if part not in PARTS]
        if unknown:
            raise ValueError(f"unknown observation part {unknown[0]!r} (known: {', '.join(PARTS)})")
        return [part for part in PARTS if part in parts]

    def observation_parts(self) -> tuple[str, ...]:
        """The parts in effect: the configured ones, else the method's default."""
        if self.observation is not None:
            return tuple(self.observation)
        return () if self.method == "best-of-n" else ("feedback",)

    def steps(self) -> int:
        """Search steps to run."""
        return 1 if self.method == "best-of-n" else self.depth


def parse_parts(text: str) -> list[str]:
    """``feedback,trajectory`` (or ``none``) as a list of parts."""
    if text.strip().lower() in ("", "none"):
        return []
    return [part.strip() for part in text.split(",") if part.strip()]


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Settings from a YAML file (keys as the long flags, with - or _)."""
    try:
        import yaml
    except ImportError:
        raise MaxcodeError("reading a YAML config needs PyYAML: pip install pyyaml") from None
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except OSError as error:
        raise MaxcodeError(f"cannot read config {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise MaxcodeError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise MaxcodeError(f"{path}: expected a mapping of settings")
    settings = {str(key).replace("-", "_"): value for key, value in loaded.items()}
    if isinstance(settings.get("observation"), str):
        settings["observation"] = parse_parts(settings["observation"])
    return maxcode_variant(settings) if settings.pop("maxcode", False) else settings


def maxcode_variant(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as the MaxCode variant of their method (``--maxcode``, ``maxcode: true`` in a
    YAML file, ``+maxcode`` in a bench, ``maxcode.optimize(maxcode=True)``): the observation
    ``trajectory,critique,best``, unless the settings name one."""
    if settings.get("observation") is not None:
        return settings
    return {**settings, "observation": list(MAXCODE_PARTS)}


def make_config(settings: dict[str, Any]) -> SearchConfig:
    """Validate settings into a config; a bad one is a one-line ``MaxcodeError``."""
    config: SearchConfig = validated(SearchConfig, settings)
    return config
