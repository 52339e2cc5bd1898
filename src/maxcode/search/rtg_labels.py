"""Reward-to-go rows of logged searches (``maxcode rtg export``): one row per evaluated node,
labelled with the best discounted reward reachable from it (``maxcode.rtg.dataset``)."""

from __future__ import annotations

from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.rtg.dataset import DEFAULT_GAMMA, RTG_SCHEMA_VERSION, reward_to_go, split_of
from maxcode.search.tree import load_tree
from maxcode.store import RunStore


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
