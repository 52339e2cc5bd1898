"""What a task is: a reference program, its tests, and how to build and run them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

TaskKind = Literal["cpp", "kernelbench"]

DEFAULT_CPP_FLAGS = ("-O3", "-std=c++17")


@dataclass(frozen=True)
class TestCase:
    """One input file and the output the program must print for it."""

    index: int
    """The test's number, from ``input.<index>.txt``."""
    input_path: Path
    """File fed to the program's stdin."""
    output_path: Path
    """The expected stdout."""


@dataclass(frozen=True)
class Task:
    """A program to make faster, with everything needed to check and time a rewrite."""

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
    """Timed runs per test and program for the wall metric (after one warm-up)."""
    extra: dict[str, object] = field(default_factory=dict, compare=False)
    """Fields of the source record that maxcode does not interpret (kept for reports)."""
