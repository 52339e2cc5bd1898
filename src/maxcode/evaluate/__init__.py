"""Evaluation: build, check and time a candidate against its task, in a sandbox."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from maxcode.api import answer_calls
from maxcode.evaluate.build import CompileResult, build_cpp
from maxcode.evaluate.compare import Comparison, compare_output
from maxcode.evaluate.cpp import evaluate_cpp
from maxcode.evaluate.kernelbench import KernelBenchSettings, evaluate_kernelbench
from maxcode.evaluate.kernelbench.rounds import reported_rounds
from maxcode.evaluate.sandbox import Limits, Sandbox, SandboxResult, detect_isolation
from maxcode.evaluate.settings import (
    EVAL_PRECISION,
    EvalRequest,
    EvalSettings,
    with_overrides,
)
from maxcode.evaluate.turns import timing_budget_s
from maxcode.kinds import kind_of
from maxcode.kinds.base import Occasion
from maxcode.tasks import Task, load_task
from maxcode.types import Feedback

__all__ = [
    "Comparison",
    "CompileResult",
    "EvalRequest",
    "EvalSettings",
    "KernelBenchSettings",
    "Limits",
    "Sandbox",
    "SandboxResult",
    "build_cpp",
    "check_timing_settings",
    "compare_output",
    "detect_isolation",
    "evaluate",
    "evaluate_cpp",
    "evaluate_kernelbench",
    "evaluate_task",
    "prebuild_task",
]


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
    workers when given, else ``REPORTED_ROUNDS`` and more while they scatter, where a screen
    runs one; projects time their fixed ``repeats`` either way). ``compile_only``: KernelBench
    builds the candidate's extensions and runs nothing. ``bar``: a search's screen, whose
    timing stops once the candidate is clearly below this reward (C++ rounds, a KernelBench
    round's calls)."""
    kind = kind_of(task)
    chosen = with_overrides(EvalSettings, settings, overrides)
    prepared = kind.prepare(task.name, chosen, rounds=rounds, compile_only=compile_only)
    occasion = Occasion(sandbox, cpu, reported, rounds, compile_only, bar=bar)
    return kind.evaluate(task, candidate_source, prepared, occasion)


def check_timing_settings() -> None:
    """Raise ``TaskError`` for a malformed ``MAXCODE_TIMING_BUDGET_S`` or
    ``MAXCODE_MOST_ROUNDS``, which each evaluation reads when it times."""
    timing_budget_s()
    reported_rounds(adaptive=True)


def prebuild_task(
    task: Task, candidate_source: str, *, device: str = "cpu", sandbox: Sandbox | None = None
) -> Feedback | None:
    """Build what a candidate compiles, apart from its evaluation (no timing, every CPU), so
    that builds can overlap other evaluations' timing on a GPU. Returns the verdict when the
    build fails; None when there was nothing to build or the build is cached for the
    evaluation."""
    settings = EvalSettings.model_validate({"device": device})
    return kind_of(task).prebuild(task, candidate_source, settings, sandbox)


def evaluate(
    task_spec: str | Path | Task,
    candidate_path: str | Path,
    request: EvalRequest | None = None,
    *,
    say: Callable[[str], None] = lambda line: None,
    **overrides: Any,
) -> Feedback:
    """``maxcode eval``: load the task and the candidate file, then judge the candidate with
    ``request`` (``EvalRequest``'s defaults when None) and ``overrides`` by setting name.
    ``device`` ``auto``: a GPU for a KernelBench task when PyTorch sees one, else the CPU
    (``say`` is told which once the candidate is judged). ``task_spec`` may be a loaded task;
    ``candidate_path`` a string with a line break is the candidate's source itself.

    ``isolation`` outside ``SAFE_LEVELS`` (what ``auto`` falls back to without bubblewrap and
    namespaces) is refused with ``UnsafeIsolation`` unless ``unsafe_isolation`` accepts it.
    The number is reported: C++ timed to ``precision`` (``EVAL_PRECISION`` unless given),
    KernelBench in its reported rounds (exactly ``rounds`` when given)."""
    chosen: EvalRequest = with_overrides(EvalRequest, request, overrides)
    # The sandbox first: a refused level is the user's to fix before anything is loaded.
    sandbox = Sandbox(chosen.isolation, unsafe_ok=chosen.unsafe_isolation)
    if isinstance(task_spec, Task):
        task = task_spec
    else:
        task = load_task(str(task_spec), chosen.pie_tests, chosen.scale)
    kind = kind_of(task)
    settings = kind.prepare(task.name, chosen)
    if isinstance(candidate_path, str) and "\n" in candidate_path:
        source = candidate_path
    else:
        source = kind.read_candidate(task, Path(candidate_path))
    if settings.device == "cuda" and not chosen.compile_only:
        # Built first, on every CPU and without the GPU's turn: an evaluation holds the GPU
        # from its workers' start, and a build of torch's headers takes a minute.
        failed = kind.prebuild(task, source, settings, sandbox)
        if failed is not None:
            return failed
    precision = EVAL_PRECISION if chosen.precision is None else chosen.precision
    occasion = Occasion(
        sandbox,
        reported=True,
        rounds=chosen.rounds,
        compile_only=chosen.compile_only,
        precision=precision,
    )
    feedback = kind.evaluate(task, source, settings, occasion)
    note = kind.device_note(settings.device) if chosen.device == "auto" else None
    if note:
        say(note)
    return feedback


# ``maxcode.evaluate(...)`` is the Python API's ``evaluate`` even once this package is imported.
answer_calls(__name__, "evaluate")
