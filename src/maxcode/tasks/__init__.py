"""Tasks: a program to make faster, its tests, and how to load them."""

from maxcode.tasks.kernelbench import (
    kernelbench_suite,
    load_kernelbench_problem,
    scaled_constants,
    shape_constants,
)
from maxcode.tasks.load import load_pie_row, load_task, load_task_folder
from maxcode.tasks.model import Task, TaskKind, TestCase

__all__ = [
    "Task",
    "TaskKind",
    "TestCase",
    "kernelbench_suite",
    "load_kernelbench_problem",
    "load_pie_row",
    "load_task",
    "load_task_folder",
    "scaled_constants",
    "shape_constants",
]
