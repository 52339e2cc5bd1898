"""Tasks: a program to make faster, its tests, and how to load them."""

from maxcode.tasks.load import load_pie_row, load_task, load_task_folder
from maxcode.tasks.model import Task, TaskKind, TestCase

__all__ = ["Task", "TaskKind", "TestCase", "load_pie_row", "load_task", "load_task_folder"]
