"""Task kinds: what differs between C++ programs, KernelBench problems and projects, behind
one interface (``Kind``). The rest of maxcode asks a task's kind (``kind_of``) and never
branches on its name; adding a kind is a folder here and one entry in ``KINDS``.

- ``base``: the interface (``Kind``) and what one evaluation is for (``Occasion``).
- ``load``: task folders and PIE rows (``load_task``); each kind loads its own files.
- ``answers``: the fenced code blocks of a model's answer.
- ``cpp``, ``kernelbench``, ``project``: one folder per kind, with its loading, evaluation,
  offline rewrites, answer parsing and prompt templates.

``evaluate_task`` is where every evaluation of a loaded task starts: the kind checks the
settings and judges the candidate with the shared harness (``maxcode.harness``).
"""

from __future__ import annotations

from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.harness.sandbox import Sandbox
from maxcode.harness.settings import EvalSettings, with_overrides
from maxcode.harness.turns import timing_budget_s
from maxcode.kinds.base import Kind, Occasion
from maxcode.kinds.cpp.kind import CppKind
from maxcode.kinds.kernelbench.kind import KernelBenchKind
from maxcode.kinds.kernelbench.rounds import reported_rounds
from maxcode.kinds.project.kind import ProjectKind
from maxcode.tasks.model import Task
from maxcode.types import Feedback

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


def evaluate_task(
    task: Task,
    candidate_source: str,
    settings: EvalSettings | None = None,
    *,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
    reported: bool = False,
    rounds: int | None = None,
    compile_only: bool = False,
    bar: float | None = None,
    **overrides: Any,
) -> Feedback:
    """Judge a candidate's source against a loaded task: ``settings`` (``EvalSettings``'
    defaults when None) with ``overrides`` by setting name (``metric="instructions"``), checked
    against the task's kind (one line for a setting it cannot take). ``cpu``: where timed runs
    are pinned (None picks one). ``reported``: the speedup is reported (``maxcode eval``,
    re-verification), not a screen of a search's candidate, and is timed to a narrower interval
    (C++: within larger caps, ``turns.REPORTED``; KernelBench: in ``rounds`` rounds of fresh
    workers when given, else ``LEAST_ROUNDS`` and more until the interval is narrow, where a
    screen runs one; projects time their fixed ``repeats`` either way). ``compile_only``:
    KernelBench builds the candidate's extensions and runs nothing. ``bar``: a search's
    screen, whose timing stops once the candidate is clearly below this reward (C++ rounds, a
    KernelBench round's calls)."""
    kind = kind_of(task)
    chosen = with_overrides(EvalSettings, settings, overrides)
    prepared = kind.prepare(task.name, chosen, rounds=rounds, compile_only=compile_only)
    occasion = Occasion(sandbox, cpu, reported, rounds, compile_only, bar=bar)
    return kind.evaluate(task, candidate_source, prepared, occasion)


def prebuild_task(
    task: Task, candidate_source: str, *, device: str = "cpu", sandbox: Sandbox | None = None
) -> Feedback | None:
    """Build what a candidate compiles, apart from its evaluation (no timing, every CPU), so
    that builds can overlap other evaluations' timing on a GPU. Returns the verdict when the
    build fails; None when there was nothing to build or the build is cached for the
    evaluation."""
    settings = EvalSettings.model_validate({"device": device})
    return kind_of(task).prebuild(task, candidate_source, settings, sandbox)


def check_timing_settings() -> None:
    """Raise ``TaskError`` for a malformed ``MAXCODE_TIMING_BUDGET_S`` or
    ``MAXCODE_MOST_ROUNDS``, which each evaluation reads when it times."""
    timing_budget_s()
    reported_rounds(adaptive=True)


__all__ = [
    "KINDS",
    "Kind",
    "check_timing_settings",
    "evaluate_task",
    "kind_named",
    "kind_of",
    "prebuild_task",
]
