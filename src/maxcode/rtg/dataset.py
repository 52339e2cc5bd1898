"""Reward-to-go datasets: their rows' format, labels and splits (rows come from logged searches,
``maxcode.search.rtg_labels``).

The label of a node at depth t is the best discounted reward reachable from it: the maximum,
over the node and its descendants d, of ``gamma ** (depth(d) - t) * reward(d)``. It is what a
value model learns to predict before a candidate runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxcode.errors import MaxcodeError

if TYPE_CHECKING:
    from maxcode.search.tree import Node

RTG_SCHEMA_VERSION = 1
DEFAULT_GAMMA = 0.9
TEST_SHARE = 5
"""One task in ``TEST_SHARE`` (by the hash of its name) goes to the test split."""


def reward_to_go(node: Node, gamma: float = DEFAULT_GAMMA) -> float:
    """max over the node and its descendants d of gamma^(depth(d) - depth(node)) * r(d)."""
    best = node.reward
    for child in node.children:
        best = max(best, gamma * reward_to_go(child, gamma))
    return best


def split_of(task: str) -> str:
    """``train`` or ``test``, decided by the task alone, so no task is on both sides."""
    bucket = int(hashlib.sha256(task.encode()).hexdigest(), 16) % TEST_SHARE
    return "test" if bucket == 0 else "train"


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """Rows as JSON lines."""
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A dataset written by ``rtg export`` (one-line errors for anything else)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise MaxcodeError(f"cannot read {path}: {error}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise MaxcodeError(f"{path}:{number}: not valid JSON") from None
        missing = {"prompt", "completion", "label", "task"} - set(row)
        if missing:
            raise MaxcodeError(f"{path}:{number}: missing {', '.join(sorted(missing))}")
        rows.append(row)
    if not rows:
        raise MaxcodeError(f"{path}: no rows")
    return rows
