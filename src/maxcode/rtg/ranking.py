"""How well a value model ranks candidates: Spearman correlation, top-1 hit rate and NDCG on
held-out tasks, against random ranking."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

Scorer = Callable[[str, list[str]], Awaitable[list[float]]]


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    position = 0
    while position < len(order):
        end = position
        while end + 1 < len(order) and values[order[end + 1]] == values[order[position]]:
            end += 1
        for index in order[position : end + 1]:
            ranks[index] = (position + end) / 2 + 1
        position = end + 1
    return ranks


def spearman(predicted: list[float], truth: list[float]) -> float:
    """Rank correlation (ties share ranks); 0 when either side is constant."""
    a, b = _ranks(predicted), _ranks(truth)
    if len(set(a)) < 2 or len(set(b)) < 2:
        return 0.0
    mean_a, mean_b = statistics.mean(a), statistics.mean(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b))


def ndcg(predicted: list[float], truth: list[float]) -> float:
    """Normalised discounted cumulative gain of the predicted order (gains: the labels)."""
    order = sorted(range(len(truth)), key=lambda i: -predicted[i])
    ideal = sorted(truth, reverse=True)
    gain = sum(truth[i] / math.log2(rank + 2) for rank, i in enumerate(order))
    best = sum(value / math.log2(rank + 2) for rank, value in enumerate(ideal))
    return gain / best if best > 0 else 1.0


def top1(predicted: list[float], truth: list[float]) -> float:
    """1 when the candidate ranked first is (one of) the truly best."""
    chosen = max(range(len(truth)), key=lambda i: predicted[i])
    return 1.0 if truth[chosen] == max(truth) else 0.0


def sibling_groups(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Candidates proposed for the same observation (same run and parent), two or more."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row.get("run_id")), str(row.get("parent_id"))), []).append(row)
    return [group for group in groups.values() if len(group) > 1]


def ranking_quality(
    groups: list[list[dict[str, Any]]], scores: list[list[float]]
) -> dict[str, float]:
    """Mean per-group top-1 and NDCG, and Spearman over all rows."""
    truths = [[float(row["label"]) for row in group] for group in groups]
    flat_scores = [value for group in scores for value in group]
    flat_truth = [value for group in truths for value in group]
    return {
        "groups": float(len(groups)),
        "spearman": spearman(flat_scores, flat_truth),
        "top1": statistics.mean(top1(s, t) for s, t in zip(scores, truths)),
        "ndcg": statistics.mean(ndcg(s, t) for s, t in zip(scores, truths)),
    }


def random_baseline(groups: list[list[dict[str, Any]]], draws: int = 200) -> dict[str, float]:
    """The same measures for random scores (mean over draws, fixed seed)."""
    generator = random.Random(0)
    results = [
        ranking_quality(groups, [[generator.random() for _ in group] for group in groups])
        for _ in range(draws)
    ]
    return {key: statistics.mean(result[key] for result in results) for key in results[0]}


async def score_groups(groups: list[list[dict[str, Any]]], scorer: Scorer) -> list[list[float]]:
    """A model's scores for every group."""
    return [
        await scorer(str(group[0].get("prompt", "")), [str(row["completion"]) for row in group])
        for group in groups
    ]
