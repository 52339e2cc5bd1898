"""C++ programs: a task folder or a PIE row, stdin to stdout, judged on its tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxcode.kinds.base import Kind, Occasion

if TYPE_CHECKING:
    from maxcode.harness.settings import EvalSettings
    from maxcode.tasks.model import Task
    from maxcode.types import Feedback


class CppKind(Kind):
    """A C++ program with its tests (``maxcode.kinds.cpp.evaluate_cpp``)."""

    name = "cpp"
    title = "C++"
    needs = (("wall", ("g++",)), ("instructions", ("g++", "valgrind")))
    language = "cpp"
    extension = ".cpp"

    def load_folder(self, folder: Path, raw: dict[str, Any], config_path: Path) -> Task:
        """``task.toml``, ``reference.cpp`` and ``tests/`` (``tasks.load``)."""
        from maxcode.kinds.load import load_cpp_folder

        return load_cpp_folder(folder, raw, config_path)

    def evaluate(
        self, task: Task, source: str, settings: EvalSettings, occasion: Occasion
    ) -> Feedback:
        from maxcode.kinds.cpp.evaluate_cpp import evaluate_cpp

        return evaluate_cpp(
            task,
            source,
            **self.run_arguments(settings, occasion),
            reported=occasion.reported,
            precision=occasion.precision,
            bar=occasion.bar,
        )
