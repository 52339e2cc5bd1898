"""Reward-to-go: labels on hand-built trees, export, the light and generative models, their
ranking quality, and a search that evaluates only the top-ranked proposals."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from maxcode.llm import ScriptedProvider
from maxcode.rtg import (
    GenerativeModel,
    LightModel,
    ranking_quality,
    reward_to_go,
    sibling_groups,
    split_of,
)
from maxcode.search import Node
from maxcode.search.rtg_labels import export_rows
from tests.helpers import ECHO_SUM
from tests.search.scripted import ScriptedExecutor, feedback_of, scripted_search


def _node(node_id: str, parent: Node | None, reward: float) -> Node:
    node = Node(node_id, parent, 1, "int main() {}", feedback=feedback_of(reward))
    if parent is not None:
        parent.children.append(node)
    return node


def test_labels_on_a_hand_built_tree() -> None:
    root = Node("0", None, 0, "ref")
    a = _node("a", root, 1.2)
    b = _node("b", a, 0.0)
    c = _node("c", b, 4.0)
    d = _node("d", a, 1.5)
    e = _node("e", root, 0.0)
    gamma = 0.5
    assert reward_to_go(c, gamma) == 4.0
    assert reward_to_go(b, gamma) == 2.0  # 0.5 * 4
    assert reward_to_go(d, gamma) == 1.5
    assert reward_to_go(a, gamma) == 1.2  # max(1.2, 0.25 * 4 via c, 0.5 * 1.5 via d)
    assert reward_to_go(a, 0.9) == pytest.approx(0.81 * 4.0)  # now c, two levels down, wins
    assert reward_to_go(e, gamma) == 0.0
    assert reward_to_go(a, 1.0) == 4.0  # undiscounted: the best descendant
    assert reward_to_go(b, 0.9) == pytest.approx(3.6)


def _program(number: int, reward: float, extra: str = "") -> str:
    return f"```cpp\n#pragma candidate {number} reward {reward} {extra}\n{ECHO_SUM}```"


def test_export_labels_every_evaluated_node(tmp_path: Path) -> None:
    replies = [_program(0, 1.5), _program(1, 0.0), _program(2, 3.0), _program(3, 1.1)]
    store, search = scripted_search(tmp_path, replies, method="cuda-llm", depth=2, candidates=2)
    asyncio.run(search.run())
    rows = export_rows(store, ["r1"], gamma=0.5)
    by_id = {row["node_id"]: row for row in rows}
    assert set(by_id) == {"1.0", "1.1", "2.0", "2.1"}
    # Step 2 refined 1.0 (1.5x); its children are 2.0 (3.0x) and 2.1 (1.1x).
    assert by_id["1.0"]["label"] == pytest.approx(max(1.5, 0.5 * 3.0))
    assert by_id["1.1"]["label"] == 0.0
    assert by_id["2.0"]["label"] == 3.0 and by_id["2.0"]["depth"] == 2
    assert by_id["2.0"]["parent_id"] == "1.0"
    assert "candidate 2 reward 3.0" in by_id["2.0"]["completion"]
    assert "Task: sum" in by_id["2.0"]["prompt"]
    assert {row["split"] for row in rows} == {split_of("sum")}
    assert all(row["schema_version"] == 1 and row["run_id"] == "r1" for row in rows)


def _rows(count: int) -> list[dict[str, object]]:
    rows = []
    for index in range(count):
        fast = index % 2 == 0
        body = "fastpath buffered_read" if fast else "slowpath cin_loop endl_flush"
        rows.append(
            {"run_id": "r", "parent_id": str(index // 4), "task": "t", "prompt": "p",
             "completion": f"int main() {{ {body} {index}; }}", "label": 3.0 if fast else 0.5}
        )  # fmt: skip
    return rows


def test_light_model_trains_scores_and_round_trips(tmp_path: Path) -> None:
    model = LightModel.train(_rows(40))
    fast = model.predict("int main() { fastpath buffered_read 99; }")
    slow = model.predict("int main() { slowpath cin_loop endl_flush 98; }")
    assert fast > 2.0 and slow < 1.0
    model.save(tmp_path / "m")
    loaded = LightModel.load(tmp_path / "m")
    assert loaded.predict("int main() { fastpath buffered_read 99; }") == pytest.approx(fast)
    groups = sibling_groups(_rows(40))
    scores = [asyncio.run(loaded.score("p", [r["completion"] for r in g])) for g in groups]  # type: ignore[misc]
    quality = ranking_quality(groups, scores)
    assert quality["top1"] == 1.0 and quality["ndcg"] == pytest.approx(1.0)
    assert quality["spearman"] > 0.8


def test_generative_model_reads_a_number_from_the_answer() -> None:
    provider = ScriptedProvider(replies=["Expected speedup: 2.5x", "no idea", "-3"])
    model = GenerativeModel(provider)
    assert asyncio.run(model.score("obs", ["a", "b", "c"])) == [2.5, 0.0, 0.0]
    assert provider.requests[0].messages[-1].content.count("```") == 2


def test_search_with_a_value_model_evaluates_only_the_top_ranked(tmp_path: Path) -> None:
    model = LightModel.train(_rows(40))
    replies = [
        _program(0, 1.1, "slowpath cin_loop endl_flush"),
        _program(1, 2.0, "fastpath buffered_read"),
        _program(2, 1.2, "slowpath cin_loop endl_flush"),
        _program(3, 2.5, "fastpath buffered_read"),
    ]
    store, search = scripted_search(
        tmp_path, replies, method="best-of-n", candidates=2, proposals=4
    )
    search.value = model
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    evaluated = [job.source for job in search.executor.jobs]
    assert len(evaluated) == 2
    assert all("fastpath" in source for source in evaluated)
    assert len(outcome.nodes) == 5  # all four proposals are recorded
    stored = {node.node_id: node.value_score for node in store.nodes("r1")}
    assert all(score is not None for score in stored.values())
    assert stored["1.1"] > stored["1.0"] and stored["1.3"] > stored["1.2"]
    assert outcome.best.reward == 2.5


def test_rtg_command_line(tmp_path: Path) -> None:
    replies = [_program(n, [1.5, 0.0, 3.0, 1.1, 2.0, 0.5][n % 6]) for n in range(12)]
    store, search = scripted_search(tmp_path, replies, method="beam", depth=2, candidates=2)
    asyncio.run(search.run())
    store.close()

    def maxcode(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    data = tmp_path / "data.jsonl"
    done = maxcode(
        "rtg",
        "export",
        "r1",
        "--gamma",
        "0.8",
        "-o",
        str(data),
        "--store",
        str(tmp_path / "runs.db"),
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(rows) >= 4 and all(row["gamma"] == 0.8 for row in rows)
    for row in rows:
        row["split"] = "train"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = maxcode("rtg", "train", str(data), "-o", str(tmp_path / "model"))
    assert done.returncode == 0, done.stderr
    done = maxcode(
        "rtg", "eval", str(data), "--model", str(tmp_path / "model"), "--split", "all", "--json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["model"]) == {"groups", "spearman", "top1", "ndcg"}
    assert result["model"]["groups"] >= 1
    done = maxcode("rtg", "train", str(data), "-o", str(tmp_path / "m2"), "--base", "gpt2")
    assert done.returncode == 2 and "not a model folder" in done.stderr
