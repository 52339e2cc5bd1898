"""What tokens cost: a built-in table of list prices, overridable per run.

Prices are USD per million tokens (input, output, and input read from or written to the
provider's prompt cache), best knowledge at the time of writing; they change, so a run can
bring its own: a mapping passed to ``PriceTable`` or a JSON/TOML file named by
``MAXCODE_PRICES`` (``{"openai/gpt-4o": {"input": 2.5, "output": 10, "cached_input": 1.25}}``;
a two-number list works too). A model missing from the table has an unknown price: its cost is
None, never 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from maxcode.llm._errors import LLMConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|latest)$")


@dataclass(frozen=True)
class ModelPrice:
    """The list price of one model."""

    input_per_mtok: float
    """USD per million input (prompt) tokens."""
    output_per_mtok: float
    """USD per million output tokens (reasoning and thinking tokens included)."""
    cached_input_per_mtok: float | None = None
    """USD per million input tokens read from the prompt cache; None: the input price."""
    cache_write_per_mtok: float | None = None
    """USD per million input tokens written to the prompt cache; None: the input price."""

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """USD for the given token counts; ``cached_tokens`` and ``cache_write_tokens`` are
        the parts of ``prompt_tokens`` read from and written to the prompt cache."""
        cached_price = self.cached_input_per_mtok
        write_price = self.cache_write_per_mtok
        plain = max(prompt_tokens - cached_tokens - cache_write_tokens, 0)
        return (
            plain * self.input_per_mtok
            + cached_tokens * (self.input_per_mtok if cached_price is None else cached_price)
            + cache_write_tokens * (self.input_per_mtok if write_price is None else write_price)
            + completion_tokens * self.output_per_mtok
        ) / 1e6


def _claude(input_per_mtok: float, output_per_mtok: float) -> ModelPrice:
    """Anthropic's prices: a cache read costs a tenth of the input, a (5-minute) cache write
    a quarter more."""
    return ModelPrice(
        input_per_mtok,
        output_per_mtok,
        round(input_per_mtok * 0.1, 6),
        round(input_per_mtok * 1.25, 6),
    )


# Keys are model names as providers spell them; a dated snapshot ("gpt-4o-2024-08-06",
# "claude-sonnet-4-5-20250929") is priced as the longest key it extends.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    # OpenAI (cached input: the price of a prefix its automatic prompt cache served)
    "gpt-4o": ModelPrice(2.50, 10.00, 1.25),
    "gpt-4o-mini": ModelPrice(0.15, 0.60, 0.075),
    "gpt-4.1": ModelPrice(2.00, 8.00, 0.50),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60, 0.10),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40, 0.025),
    "gpt-4-turbo": ModelPrice(10.00, 30.00),
    "gpt-3.5-turbo": ModelPrice(0.50, 1.50),
    "gpt-5": ModelPrice(1.25, 10.00, 0.125),
    "gpt-5-mini": ModelPrice(0.25, 2.00, 0.025),
    "gpt-5-nano": ModelPrice(0.05, 0.40, 0.005),
    "o1": ModelPrice(15.00, 60.00, 7.50),
    "o1-mini": ModelPrice(1.10, 4.40, 0.55),
    "o3": ModelPrice(2.00, 8.00, 0.50),
    "o3-mini": ModelPrice(1.10, 4.40, 0.55),
    "o4-mini": ModelPrice(1.10, 4.40, 0.275),
    # Anthropic
    "claude-opus-4-5": _claude(5.00, 25.00),
    "claude-opus-4-1": _claude(15.00, 75.00),
    "claude-opus-4": _claude(15.00, 75.00),
    "claude-sonnet-4-5": _claude(3.00, 15.00),
    "claude-sonnet-4": _claude(3.00, 15.00),
    "claude-haiku-4-5": _claude(1.00, 5.00),
    "claude-3-7-sonnet": _claude(3.00, 15.00),
    "claude-3-5-sonnet": _claude(3.00, 15.00),
    "claude-3-5-haiku": _claude(0.80, 4.00),
    "claude-3-opus": _claude(15.00, 75.00),
    "claude-3-haiku": _claude(0.25, 1.25),
}


def _parse_price(name: str, value: object, source: str) -> ModelPrice:
    if isinstance(value, ModelPrice):
        return value
    cache: tuple[object, object] = (None, None)
    if isinstance(value, Mapping) and "input" in value and "output" in value:
        pair: tuple[object, object] = (value["input"], value["output"])
        cache = (value.get("cached_input"), value.get("cache_write"))
    elif isinstance(value, list | tuple) and len(value) == 2:
        pair = (value[0], value[1])
    else:
        raise LLMConfigError(
            f"{source}: price of {name!r} must be {{input = X, output = Y}} "
            "(USD per million tokens; optionally cached_input and cache_write)"
        )
    try:
        numbers = [float(part) for part in pair]  # type: ignore[arg-type]
        cached = [None if part is None else float(part) for part in cache]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LLMConfigError(f"{source}: price of {name!r} is not a number") from None
    if min(numbers + [part for part in cached if part is not None]) < 0:
        raise LLMConfigError(f"{source}: price of {name!r} is negative")
    return ModelPrice(numbers[0], numbers[1], cached[0], cached[1])


def load_price_file(path: Path) -> dict[str, ModelPrice]:
    """Read prices from a JSON or TOML file (by suffix; JSON unless it ends in ``.toml``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LLMConfigError(f"cannot read price file {path}: {exc.strerror}") from None
    try:
        data: object = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise LLMConfigError(f"price file {path} is not valid: {exc}") from None
    if not isinstance(data, Mapping):
        raise LLMConfigError(f"price file {path} must map model names to prices")
    return {str(name): _parse_price(str(name), value, str(path)) for name, value in data.items()}


class PriceTable:
    """Looks up a model's price: overrides first, then ``MAXCODE_PRICES``, then the defaults."""

    def __init__(
        self,
        overrides: Mapping[str, ModelPrice | Mapping[str, float] | tuple[float, float]]
        | None = None,
        *,
        use_environment: bool = True,
        defaults: Mapping[str, ModelPrice] = DEFAULT_PRICES,
    ) -> None:
        self._prices: dict[str, ModelPrice] = dict(defaults)
        path = os.environ.get("MAXCODE_PRICES") if use_environment else None
        if path:
            self._prices.update(load_price_file(Path(path).expanduser()))
        for name, value in (overrides or {}).items():
            self._prices[name] = _parse_price(name, value, "price overrides")

    def lookup(self, model: str, provider: str | None = None) -> ModelPrice | None:
        """The price of ``provider/model`` or ``model``; None when unknown.

        An exact name wins; otherwise a known name that the model extends with a snapshot
        suffix (``-2024-08-06``, ``-20250929``, ``-0125``, ``-latest``). Other variants
        (``o3-pro``, ``gpt-4o-audio-preview``) are priced differently and stay unknown.
        """
        candidates = [f"{provider}/{model}", model] if provider else [model]
        for name in candidates:
            if name in self._prices:
                return self._prices[name]
        for name in candidates:
            snapshot = _SNAPSHOT_SUFFIX.search(name)
            if snapshot and name[: snapshot.start()] in self._prices:
                return self._prices[name[: snapshot.start()]]
        return None

    def cost(
        self,
        model: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        provider: str | None = None,
    ) -> float | None:
        """USD for the given usage; None when the price or the usage is unknown."""
        price = self.lookup(model, provider)
        if price is None or prompt_tokens is None or completion_tokens is None:
            return None
        return price.cost(prompt_tokens, completion_tokens)
