"""Task kinds behind one interface: every kind implements it, nothing outside ``maxcode.kinds``
branches on a kind's name, and a new kind is a class and one registration."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from maxcode.errors import MaxcodeError
from maxcode.harness.settings import EvalRequest, EvalSettings
from maxcode.kinds import KINDS, Kind, evaluate_task, kind_named, kind_of
from maxcode.kinds.base import Occasion
from maxcode.kinds.load import load_task
from maxcode.search.critique import TemplateCritic
from maxcode.search.observation import template_set
from maxcode.search.tree import Node
from maxcode.tasks import Task
from maxcode.tasks.model import TaskKind
from maxcode.types import Feedback

SOURCE = Path(__file__).resolve().parents[1] / "src" / "maxcode"
TEMPLATES = SOURCE / "kinds"


def kind_branches(source: str) -> list[str]:
    """Where ``source`` branches on a task kind's name: a comparison of something called
    ``kind``/``task_kind`` with a kind's name (``==``, ``!=``, ``in``), or a table keyed by
    two or more kind names (what ``maxcode.kinds`` replaces)."""
    names = set(KINDS)
    found: list[str] = []

    def named_kind(node: ast.AST) -> bool:  # task.kind, record.task_kind, getattr(t, "kind")
        return re.search(r"kind\b", ast.unparse(node)) is not None

    def kind_names(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(kind_names(element) for element in node.elts)
        return False

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(named_kind(side) for side in sides) and any(kind_names(s) for s in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Match) and named_kind(node.subject):
            values = [case.pattern for case in node.cases]
            if any(
                isinstance(value, ast.MatchValue) and kind_names(value.value) for value in values
            ):
                found.append(f"line {node.lineno}: match on a kind")
        elif isinstance(node, ast.Dict):
            keys = [key for key in node.keys if isinstance(key, ast.Constant)]
            if sum(key.value in names for key in keys) >= 2:
                found.append(f"line {node.lineno}: a table by kind")
    return found


def test_the_check_finds_the_branches_it_forbids() -> None:
    old = (
        'if task.kind == "project":\n    pass\n'
        'if record.task_kind in ("cpp", "project"):\n    pass\n'
        'EXTENSIONS = {"cpp": ".cpp", "kernelbench": ".py", "project": ""}\n'
        'if language == "cpp":\n    pass\n'  # a language, not a kind: allowed
        'if getattr(task, "kind") != "kernelbench":\n    pass\n'
        'match task.kind:\n    case "project":\n        pass\n'
    )
    found = sorted(int(line.split(":")[0].removeprefix("line ")) for line in kind_branches(old))
    assert found == [1, 3, 5, 8, 10]


def test_nothing_outside_the_registry_branches_on_a_kind() -> None:
    kinds = SOURCE / "kinds"
    found = {
        str(path.relative_to(SOURCE)): branches
        for path in sorted(SOURCE.rglob("*.py"))
        if kinds not in path.parents
        and (branches := kind_branches(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "ask maxcode.kinds (kind_of(task)...) instead of branching on its name"


def test_every_kind_implements_the_interface() -> None:
    assert set(KINDS) == set(TaskKind.__args__)  # type: ignore[attr-defined]
    metrics = set(EvalSettings.model_fields["metric"].annotation.__args__)  # type: ignore[union-attr]
    for name, kind in KINDS.items():
        assert isinstance(kind, Kind) and not inspect.isabstract(type(kind))
        assert kind.name == name and kind_named(name) is kind
        assert (TEMPLATES / kind.templates / "templates" / "policy_system.j2").is_file(), name
        assert kind.metrics and set(kind.metrics) <= metrics, name
        assert kind.title and kind.language and isinstance(kind.extension, str)
    with pytest.raises(MaxcodeError, match="unknown task kind 'fortran'"):
        kind_named("fortran")


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("check_scale", 0.5, "--check-scale is for KernelBench tasks"),
        ("backend", "triton", "--backend is for KernelBench tasks"),
        ("device", "cuda", "C++ tasks run on the CPU; --device is for KernelBench"),
        ("metric", "printed", "C++ tasks take --metric wall or instructions"),
    ],
)
def test_a_setting_the_kind_cannot_take_is_one_line_naming_the_task(
    setting: str, value: Any, message: str
) -> None:
    task = Task(name="sum", kind="cpp", reference="", tests=(), origin="here")
    settings = EvalSettings.model_validate({setting: value})
    with pytest.raises(MaxcodeError) as refused:
        KINDS["cpp"].prepare(task.name, settings)
    assert str(refused.value) == f"sum: {message}"
    with pytest.raises(MaxcodeError, match="--rounds is for KernelBench"):
        KINDS["project"].prepare("p", EvalRequest(rounds=2))


class _Toy(Kind):
    """A kind no module of maxcode knows: programs are lines of text, and a shorter program is
    faster (nothing runs, so nothing needs a sandbox)."""

    name = "toy"
    title = "toy"
    language = "text"
    extension = ".txt"

    def load_folder(self, folder: Path, raw: dict[str, Any], config_path: Path) -> Task:
        reference = (folder / "reference.txt").read_text()
        return Task(name=folder.name, kind="toy", reference=reference, tests=(), origin="toy")  # type: ignore[arg-type]

    @property
    def templates(self) -> str:
        return "cpp"

    def evaluate(
        self, task: Task, source: str, settings: EvalSettings, occasion: Occasion
    ) -> Feedback:
        speedup = len(task.reference) / max(len(source), 1)
        return Feedback(
            task=task.name,
            compiled=True,
            correct=True,
            speedup=speedup,
            metric=settings.metric,
            reference_cost=len(task.reference),
            candidate_cost=len(source),
            tests_passed=1,
            tests_total=1,
        )


def test_a_new_kind_is_one_class_and_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(KINDS, "toy", _Toy())
    (tmp_path / "task.toml").write_text('kind = "toy"\n')
    (tmp_path / "reference.txt").write_text("a long and slow program\n")
    task = load_task(str(tmp_path))
    assert kind_of(task).name == "toy" and template_set(task) == "cpp"
    candidate = kind_of(task).extract(task, "Here:\n```\nfast\n```\n", task.reference)
    assert candidate == "fast\n"
    feedback = evaluate_task(task, candidate)
    assert feedback.correct and feedback.speedup == pytest.approx(24 / 5)
    critique = TemplateCritic()
    node = Node("1", Node("0", None, 0, task.reference), 1, candidate, feedback=feedback)
    text = asyncio.run(critique.critique(task, node, "critic:1"))
    assert text.startswith("Diagnosis: correct and 4.80x faster")
    with pytest.raises(MaxcodeError, match=": --check-scale is for KernelBench tasks"):
        evaluate_task(task, candidate, check_scale=0.5)
