"""Task kinds: what differs between C++ programs, KernelBench problems and projects, behind
one interface (``Kind``). The rest of maxcode asks a task's kind (``kind_of``) and never
branches on its name; adding a kind is a module here and one entry in ``KINDS``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from maxcode.errors import MaxcodeError
from maxcode.kinds.base import Kind
from maxcode.kinds.cpp import CppKind
from maxcode.kinds.kernelbench import KernelBenchKind
from maxcode.kinds.project import ProjectKind

if TYPE_CHECKING:
    from maxcode.tasks.model import Task

KINDS: dict[str, Kind] = {kind.name: kind for kind in (CppKind(), KernelBenchKind(), ProjectKind())}
"""Every kind, by name."""


def kind_named(name: str) -> Kind:
    """The kind called ``name`` (a task's, a stored run's); unknown is a ``MaxcodeError``."""
    try:
        return KINDS[name]
    except KeyError:
        raise MaxcodeError(f"unknown task kind {name!r} (known: {', '.join(KINDS)})") from None


def kind_of(task: Task) -> Kind:
    """The kind of a loaded task."""
    return kind_named(task.kind)


__all__ = ["KINDS", "Kind", "kind_named", "kind_of"]
