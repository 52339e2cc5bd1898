"""The user's own project: a folder with ``task.toml``, its build, check and bench commands,
and the files a candidate may edit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxcode.kinds.base import Kind, Occasion

if TYPE_CHECKING:
    from maxcode.harness.settings import EvalSettings
    from maxcode.kinds.project.spec import ProjectTask
    from maxcode.tasks.model import Task
    from maxcode.types import Feedback


class ProjectKind(Kind):
    """A project task (``evaluate_project``). A candidate is the project's editable files; it
    is stored and shown as one text, a bundle of them (``spec``)."""

    name = "project"
    title = "project"
    # Besides what the project's own build, check and bench commands run.
    needs = (("wall", ()), ("instructions", ("valgrind",)))
    language = "project"
    extension = ""
    metrics = ("wall", "instructions", "printed")

    def load_folder(self, folder: Path, raw: dict[str, Any], config_path: Path) -> Task:
        """``task.toml`` with the project's commands and editable files (``tasks.project``)."""
        from maxcode.kinds.project.spec import load_project_folder

        return load_project_folder(folder, raw, config_path)

    def evaluate(
        self, task: Task, source: str, settings: EvalSettings, occasion: Occasion
    ) -> Feedback:
        from maxcode.kinds.project.evaluate_project import evaluate_project

        task = _project(task)
        # A project times its ``repeats`` whether the number is reported or not; a screen stops
        # early once the candidate is surely below the search's bar.
        return evaluate_project(
            task, source, bar=occasion.bar, **self.run_arguments(settings, occasion)
        )

    def read_candidate(self, task: Task, path: Path) -> str:
        """A folder of replacement files, a unified diff, a bundle, or one file."""
        from maxcode.kinds.project.evaluate_project import load_candidate

        return load_candidate(_project(task), path)

    def write_program(self, source: str, path: Path) -> None:
        """A folder of the editable files, as ``maxcode eval TASK FOLDER`` takes it."""
        from maxcode.kinds.project.spec import write_bundle

        write_bundle(source, path)

    def extract(self, task: Task, answer: str, parent: str) -> str | None:
        """The bundle the answer's file blocks or edits make of the parent's files (failed
        edits give a bundle that says why)."""
        from maxcode.kinds.project.edits import extract_project

        return extract_project(answer, parent, _project(task).project)


def _project(task: Task) -> ProjectTask:
    from maxcode.kinds.project.spec import ProjectTask

    if not isinstance(task, ProjectTask):
        raise TypeError(f"{task.name} is a {task.kind} task, not a project's")
    return task
