"""Tasks: what a task is (a program to make faster and its tests). Loading a task is its
kind's (``maxcode.kinds.load``)."""

from maxcode.tasks.model import Task, TaskKind, TestCase

__all__ = ["Task", "TaskKind", "TestCase"]
