"""Reward-to-go datasets from logged searches.

The label of a node at depth t is the best discounted reward reachable from it: the maximum,
over the node and its descendants d, of ``gamma ** (depth(d) - t) * reward(d)``. It is what a
value model learns to predict before a candidate runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.search.tree import Node, load_tree
from maxcode.store import RunStore

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


def export_rows(
    store: RunStore, run_ids: list[str], gamma: float = DEFAULT_GAMMA
) -> list[dict[str, Any]]:
    """One row per evaluated node of the runs."""
    if not 0 < gamma <= 1:
        raise MaxcodeError(f"--gamma must be in (0, 1], not {gamma}")
    rows: list[dict[str, Any]] = []
    for run_id in run_ids:
        record = store.get_run(run_id)
        if record is None:
            raise MaxcodeError(f"no run {run_id!r} in {store.path}")
        prompts: dict[str, str] = {}
        for node in load_tree(store, record.run_id)[1:]:
            if node.source is None or node.feedback is None:
                continue
            purpose = f"policy:{node.step}:{node.parent.node_id if node.parent else '0'}"
            if purpose not in prompts:
                call = store.find_call(record.run_id, purpose)
                prompts[purpose] = call.messages[-1].content if call else ""
            rows.append(
                {
                    "schema_version": RTG_SCHEMA_VERSION,
                    "run_id": record.run_id,
                    "task": record.task_name,
                    "split": split_of(record.task_name),
                    "node_id": node.node_id,
                    "parent_id": node.parent.node_id if node.parent else None,
                    "depth": node.depth,
                    "prompt": prompts[purpose],
                    "completion": node.source,
                    "reward": node.reward,
                    "label": reward_to_go(node, gamma),
                    "gamma": gamma,
                }
            )
    return rows


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
