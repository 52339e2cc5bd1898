"""Reward-to-go models: learn from logged searches, rank candidates before they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.rtg.dataset import (
    DEFAULT_GAMMA,
    RTG_SCHEMA_VERSION,
    read_jsonl,
    reward_to_go,
    split_of,
    write_jsonl,
)
from maxcode.rtg.generative import GenerativeModel, parse_score
from maxcode.rtg.light import LightModel
from maxcode.rtg.ranking import random_baseline, ranking_quality, score_groups, sibling_groups

ValueModel = Any
"""A reward-to-go model: anything with ``async score(observation, candidates)``."""

__all__ = [
    "DEFAULT_GAMMA",
    "RTG_SCHEMA_VERSION",
    "GenerativeModel",
    "LightModel",
    "load_model",
    "parse_score",
    "random_baseline",
    "ranking_quality",
    "read_jsonl",
    "reward_to_go",
    "score_groups",
    "sibling_groups",
    "split_of",
    "write_jsonl",
]


def load_model(
    spec: str,
    base_url: str | None = None,
    *,
    budget: Any = None,
    call_log: Any = None,
    replay: Any = None,
) -> ValueModel:
    """A trained model folder, or ``provider/model`` for the generative model, whose calls go
    through ``budget`` and ``call_log`` like the policy's, and are replayed by ``replay``
    (purpose -> recorded call) on a resumed run."""
    folder = Path(spec)
    if folder.is_dir():
        meta = folder / "model.json"
        if meta.is_file() and '"kind": "lora"' in meta.read_text():
            from maxcode.rtg.lora import LoRAModel

            return LoRAModel(folder)
        return LightModel.load(folder)
    if "/" in spec and not folder.exists():
        from maxcode.llm import resolve_model

        provider = resolve_model(spec, base_url=base_url, budget=budget, call_log=call_log)
        return GenerativeModel(provider, replay=replay)
    raise MaxcodeError(f"{spec}: neither a model folder nor provider/model")
