"""Suites: the tasks a bench runs, from folders, folders of task folders, and PIE files."""

from __future__ import annotations

import json
from pathlib import Path

from maxcode.errors import TaskError
from maxcode.kinds.kernelbench.problem import PROBLEM_FILE, kernelbench_suite


def expand_suite(specs: list[str]) -> list[str]:
    """Task specs for every task the arguments name, in order.

    A task folder is one task; a folder whose sub-folders are task folders is a suite; a
    KernelBench level folder (``<id>_<Name>.py`` files) is a suite in id order; a KernelBench
    ``.py`` file is one task; a ``FILE.jsonl`` is every row (``FILE.jsonl#N``); a
    ``FILE.jsonl#N`` is one row.
    """
    tasks: list[str] = []
    for spec in specs:
        path = Path(spec)
        one_row = "#" in spec and spec.split("#", 1)[0].endswith(".jsonl")
        task_folder = path.is_dir() and (path / "task.toml").is_file()
        problem_file = path.is_file() and path.suffix == ".py"
        if one_row or task_folder or problem_file:
            tasks.append(spec)
        elif path.is_dir() and any(PROBLEM_FILE.match(child.name) for child in path.iterdir()):
            tasks += [str(problem) for problem in kernelbench_suite(path)]
        elif path.is_dir():
            found = sorted(child for child in path.iterdir() if (child / "task.toml").is_file())
            if not found:
                raise TaskError(f"{spec}: neither a task folder nor a folder of task folders")
            tasks += [str(child) for child in found]
        elif path.is_file() and path.suffix == ".jsonl":
            tasks += [f"{spec}#{number}" for number in range(_rows(path))]
        elif not path.exists():
            raise TaskError(f"task not found: {spec}")
        else:
            raise TaskError(f"{spec}: not a task folder, a suite folder or a PIE .jsonl file")
    if not tasks:
        raise TaskError("the suite holds no tasks")
    return tasks


def _rows(path: Path) -> int:
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise TaskError(f"{path}: cannot be read: {error}") from None
    for number, line in enumerate(lines):
        try:
            json.loads(line)
        except json.JSONDecodeError:
            raise TaskError(f"{path}: row {number} is not valid JSON") from None
    return len(lines)
