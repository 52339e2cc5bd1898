"""What a task is: a reference program, its tests, and how to build and run them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

TaskKind = Literal["cpp", "kernelbench", "project"]

DEFAULT_CPP_FLAGS = ("-O3", "-std=c++17")
HELD_OUT_FROM = 10
"""Tasks with at least this many tests hold some out by default."""
HELD_OUT_SHARE = 0.2
"""The share of a task's tests held out by default (the last ones in index order)."""
FLOAT_ABS_TOL = 1e-6
"""Default absolute tolerance for real-number tokens in a C++ task's output."""
FLOAT_REL_TOL = 1e-6
"""Default relative tolerance (against the expected value) for real-number tokens."""


@dataclass(frozen=True)
class TestCase:
    """One input file and the output the program must print for it."""

    index: int
    """The test's number, from ``input.<index>.txt``."""
    input_path: Path
    """File fed to the program's stdin."""
    output_path: Path
    """The expected stdout."""
    held_out: bool = False
    """Used for the reward but never shown: a failure here says only that a hidden test
    failed, so a program fitted to the shown tests cannot learn what it got wrong."""


def hold_out(
    tests: tuple[TestCase, ...], chosen: list[int] | None = None, share: float | None = None
) -> tuple[TestCase, ...]:
    """Mark tests as held out: the ``chosen`` indices; else the last ``share`` of them; else,
    for tasks with at least ``HELD_OUT_FROM`` tests, the last ``HELD_OUT_SHARE``."""
    if chosen is not None:
        hidden = set(chosen)
    else:
        if share is None:
            share = HELD_OUT_SHARE if len(tests) >= HELD_OUT_FROM else 0.0
        count = min(len(tests) - 1, round(len(tests) * share)) if tests else 0
        hidden = {test.index for test in tests[len(tests) - count :]} if count > 0 else set()
    return tuple(replace(test, held_out=test.index in hidden) for test in tests)


@dataclass(frozen=True)
class Task:
    """A program to make faster, with everything needed to check and time a rewrite. Kinds
    with more to say extend it (``KernelBenchTask``, ``ProjectTask``); ``maxcode.kinds`` says
    what each kind does with its tasks."""

    name: str
    """Short name, used in run records and reports."""
    kind: TaskKind
    """Which evaluator serves it."""
    reference: str
    """Source of the program to make faster."""
    tests: tuple[TestCase, ...]
    """Test cases, in numeric order."""
    origin: str
    """Where the task came from (a folder, or ``FILE.jsonl#N``), for messages."""
    description: str = ""
    """What the program computes, for prompts."""
    compile_flags: tuple[str, ...] = DEFAULT_CPP_FLAGS
    """Compiler flags for the reference and every candidate."""
    timeout_s: float = 10.0
    """Wall-clock limit for one run of one test."""
    memory_mb: int = 2048
    """Address-space limit for one run, in MiB."""
    repeats: int = 5
    """The wall metric's timed rounds (after one warm-up round). C++: the fewest, raised to
    ``WALL_MIN_ROUNDS`` (6) and added to until the interval is narrow; projects: the rounds of
    their bench, which a search's screen may stop early."""
    cpus: int = 1
    """The CPU budget of one run: CPU time of all its processes may not exceed this many times
    its wall time (1: pinned to one CPU; more for tasks where parallelism is the point,
    reference and candidate timed under the same budget)."""
    float_abs_tol: float = FLOAT_ABS_TOL
    """A real-number token of the output matches when it differs from the expected one by at
    most this much, or by at most ``float_rel_tol`` times the expected value (integer tokens
    always match exactly; see ``maxcode.harness.compare``)."""
    float_rel_tol: float = FLOAT_REL_TOL
    """The relative tolerance for real-number tokens, against the expected value."""
    extra: dict[str, object] = field(default_factory=dict, compare=False)
    """Fields of the source record that maxcode does not interpret (kept for reports)."""
