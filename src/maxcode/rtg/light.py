"""The light reward-to-go model: hashed n-grams of the candidate, a ridge regression trained by
AdaGrad. It trains on the CPU in seconds, for users without a GPU."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError

BUCKETS = 1 << 18
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\sA-Za-z0-9_]")
LIGHT_SCHEMA_VERSION = 1


def features(text: str) -> dict[int, float]:
    """Hashed unigrams and bigrams of the program's tokens, scaled to unit length."""
    tokens = _TOKEN.findall(text)
    grams = Counter(tokens + [a + " " + b for a, b in itertools.pairwise(tokens)])
    hashed: dict[int, float] = {}
    for gram, count in grams.items():
        bucket = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
        index = bucket % BUCKETS
        hashed[index] = hashed.get(index, 0.0) + 1.0 + math.log(count)
    norm = math.sqrt(sum(value * value for value in hashed.values())) or 1.0
    return {index: value / norm for index, value in hashed.items()}


class LightModel:
    """Predicts log(1 + reward-to-go) from the candidate's text."""

    name = "light"

    def __init__(self, weights: dict[int, float] | None = None, bias: float = 0.0) -> None:
        self.weights = weights or {}
        self.bias = bias

    def predict(self, completion: str) -> float:
        """Predicted reward-to-go of one candidate."""
        raw = self.bias + sum(self.weights.get(i, 0.0) * v for i, v in features(completion).items())
        return math.expm1(max(raw, 0.0))

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One predicted reward-to-go per candidate."""
        return [self.predict(candidate) for candidate in candidates]

    @classmethod
    def train(
        cls, rows: list[dict[str, Any]], epochs: int = 30, l2: float = 1e-4, seed: int = 0
    ) -> LightModel:
        """Fit on rows with ``completion`` and ``label`` (AdaGrad on the squared error)."""
        if not rows:
            raise MaxcodeError("no training rows")
        data = [
            (features(row["completion"]), math.log1p(max(float(row["label"]), 0.0))) for row in rows
        ]
        bias = sum(target for _, target in data) / len(data)
        weights: dict[int, float] = {}
        squares: dict[int, float] = {}
        rate = 0.5
        order = list(range(len(data)))
        shuffle = random.Random(seed)
        for _ in range(epochs):
            shuffle.shuffle(order)
            for position in order:
                x, target = data[position]
                error = bias + sum(weights.get(i, 0.0) * v for i, v in x.items()) - target
                for index, value in x.items():
                    gradient = error * value + l2 * weights.get(index, 0.0)
                    squares[index] = squares.get(index, 0.0) + gradient * gradient
                    weights[index] = weights.get(index, 0.0) - rate * gradient / math.sqrt(
                        squares[index] + 1e-8
                    )
        return cls(weights, bias)

    def save(self, folder: Path) -> None:
        """Write ``model.json`` into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        payload = {
            "kind": "light",
            "schema_version": LIGHT_SCHEMA_VERSION,
            "buckets": BUCKETS,
            "bias": self.bias,
            "weights": {str(index): value for index, value in self.weights.items() if value},
        }
        (folder / "model.json").write_text(json.dumps(payload))

    @classmethod
    def load(cls, folder: Path) -> LightModel:
        """Read a model written by ``save``."""
        path = folder / "model.json"
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise MaxcodeError(f"{path}: not a reward-to-go model ({error})") from None
        if payload.get("kind") != "light" or payload.get("buckets") != BUCKETS:
            raise MaxcodeError(f"{path}: not a light reward-to-go model of this version")
        weights = {int(index): float(value) for index, value in payload["weights"].items()}
        return cls(weights, float(payload["bias"]))
