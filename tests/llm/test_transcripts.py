"""What real models wrote, replayed: ``../shared/transcripts/*.jsonl`` (the prompts a search sent
a frontier-class model and its answers; see the folder's README) through extraction, the
prompts the search builds around the answers, and the scripted server in real searches.

The transcripts are read where they lie, beside the repository, never copied into it; without
the folder these tests are skipped. The KernelBench replay builds and judges every answer on
the CPU: opt-in (``slow``)."""

from __future__ import annotations

import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import maxcode
from maxcode.kinds import kind_of
from maxcode.kinds.answers import LANGUAGE_TAGS, find_code_blocks, normalize_language
from maxcode.kinds.load import load_task
from maxcode.search.observation import History, build_critic_prompt, build_policy_prompt
from maxcode.search.tree import Node, load_tree
from maxcode.store import RunStore
from maxcode.tasks import Task
from tests.helpers import REPO
from tests.llm.fake_llm_server import Step, is_critic, serving
from tests.search.scripted import feedback_of

TRANSCRIPTS = REPO.parent / "shared" / "transcripts"

pytestmark = pytest.mark.skipif(
    not TRANSCRIPTS.is_dir(), reason=f"no real transcripts at {TRANSCRIPTS}"
)

CASES = {
    # name: (task, scale, the settings the transcript's search ran with)
    "lis": ("tasks/lis", 1.0, {}),
    "kb95": ("tasks/kb_l2_95.py", 0.1, {"device": "cpu", "scale": 0.1}),
}
MAXCODE = ("trajectory", "critique", "best")


@cache
def rows(name: str) -> tuple[dict[str, Any], ...]:
    """The transcript's requests and answers, in order of arrival."""
    lines = (TRANSCRIPTS / f"{name}.jsonl").read_text().splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


def policy_rows(name: str) -> list[dict[str, Any]]:
    """The policy's requests (two candidates each; the critic's ask for one)."""
    return [row for row in rows(name) if (row["request"].get("n") or 1) > 1]


def critic_rows(name: str) -> list[dict[str, Any]]:
    return [row for row in rows(name) if (row["request"].get("n") or 1) == 1]


def task_of(name: str) -> Task:
    path, scale, _ = CASES[name]
    return load_task(str(TRANSCRIPTS / path), None, scale)


def last_block(answer: str, language: str) -> str:
    """The program an answer holds, read plainly: its last complete block in the language."""
    tags = LANGUAGE_TAGS[normalize_language(language)]
    return [b for b in find_code_blocks(answer) if b.complete and b.tag in tags][-1].code


@pytest.mark.parametrize("name", CASES)
def test_every_answer_extracts_to_the_program_it_holds(name: str) -> None:
    task = task_of(name)
    kind = kind_of(task)
    answers = [answer for row in policy_rows(name) for answer in row["answers"]]
    assert len(answers) == 6
    for answer in answers:
        program = kind.extract(task, answer, task.reference)
        assert program is not None and program == last_block(answer, kind.language)
        assert ("class ModelNew" in program) if name == "kb95" else ("int main" in program)
    for row in critic_rows(name):
        [critique] = row["answers"]
        assert critique.startswith("Diagnosis:") and "Suggestions:" in critique


@pytest.mark.parametrize("name", CASES)
def test_the_first_prompt_is_the_one_the_model_answered(name: str) -> None:
    task = task_of(name)
    root = Node("0", None, 0, task.reference)
    history = History(task, root, root, [root], 6000, MAXCODE, device="cpu", step=1)
    system, user = build_policy_prompt(history)
    sent = policy_rows(name)[0]["request"]["messages"]
    assert [message["content"] for message in sent] == [system, user]


@pytest.mark.parametrize("name", CASES)
def test_prompts_built_around_the_answers_hold_them(name: str) -> None:
    """The answers as one branch of a search (each judged correct, each critiqued with the
    model's own words): every prompt built around them renders and holds what it should."""
    task = task_of(name)
    kind = kind_of(task)
    root = Node("0", None, 0, task.reference)
    nodes, parent = [root], root
    critiques = iter(row["answers"][0] for row in critic_rows(name))
    for step, row in enumerate(policy_rows(name), start=1):
        children = []
        for index, answer in enumerate(row["answers"]):
            node = Node(f"{step}.{index}", parent, step, kind.extract(task, answer, task.reference))
            node.completion, node.feedback = answer, feedback_of(1.0 + step + index, task.name)
            node.critique = next(critiques)
            parent.children.append(node)
            children.append(node)
        nodes += children
        parent = children[-1]
        history = History(task, parent, parent, nodes, 6000, MAXCODE, device="cpu", step=step + 1)
        system, user = build_policy_prompt(history)
        assert system.strip() and parent.source is not None
        assert parent.source.rstrip() in user and parent.critique.strip() in user
        for child in children:
            _, review = build_critic_prompt(task, child)
            assert child.source is not None and child.source.rstrip() in review
            assert "Correct on all" in review and "Cut answers" not in review


def replaying(name: str) -> Any:
    """A responder that answers the search with the transcript: the policy's answers in order;
    for each critique, the model's critique of the same program."""
    policy = [row["answers"] for row in policy_rows(name)]
    critiques = [
        (row["request"]["messages"][-1]["content"], row["answers"][0]) for row in critic_rows(name)
    ]
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Step:
        prompt = body["messages"][-1]["content"]
        if is_critic(body):
            attempt = prompt.split("## What the harness found")[0].split("## Attempt", 1)[1]
            program = attempt.split("```")[1].split("\n", 1)[1]  # the block, less its tag
            for sent, critique in critiques:
                if program in sent:
                    return Step(texts=[critique])
            raise AssertionError("a critique of a program the model never wrote")
        with lock:
            return Step(texts=policy.pop(0))

    return respond


def replay(name: str, store: Path) -> Any:
    """The transcript's search (``--maxcode --depth 3 --candidates 2``) against its answers."""
    _, _, settings = CASES[name]
    with serving(replaying(name)) as server:
        summary = maxcode.optimize(
            TRANSCRIPTS / CASES[name][0], model="openai/frontier", base_url=server.url,
            maxcode=True, depth=3, candidates=2, store=store, profile=False, verify=False,
            **settings,
        )  # fmt: skip
        policy_prompts = [
            seen.body["messages"][-1]["content"] for seen in server.seen if not is_critic(seen.body)
        ]
    assert summary.status == "done", summary.message
    assert summary.llm_calls == 9 and summary.evaluations == 6 and summary.void == []
    nodes = load_tree(RunStore(store), summary.run_id)
    assert [node.status for node in nodes[1:]] == ["correct"] * 6
    # Each prompt after the first holds the program it asks to improve, with its critique.
    for prompt, step in zip(policy_prompts[1:], (2, 3)):
        improved = prompt.split("## Program to improve", 1)[1]
        assert any(
            node.step == step - 1 and node.source and node.source.rstrip() in improved
            for node in nodes
        )
        assert "Critique: Diagnosis:" in prompt
    return summary


def test_a_search_replays_the_cpp_transcript(tmp_path: Path) -> None:
    summary = replay("lis", tmp_path / "runs.db")
    assert summary.best_speedup > 10  # O(n log n) against the reference's O(n^2)


@pytest.mark.slow
def test_a_search_replays_the_kernelbench_transcript_and_judges_every_answer_correct(
    tmp_path: Path,
) -> None:
    replay("kb95", tmp_path / "runs.db")
