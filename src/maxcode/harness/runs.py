"""What the C++ and the project evaluators share about a candidate's runs: the CPU budget a run
is held to and the findings on a finished run, valgrind's command line and its count of every
process's instructions, the interpreter's folders a sandbox must show."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from maxcode.harness.integrity import Verdict
from maxcode.harness.sandbox import SandboxResult

CPU_SLACK = 1.2
"""A run may use this share of CPU time over its budget (CPUs x wall time) before it is
judged parallel: kernel accounting and the init's own exit are not exact to the tick."""
CPU_SLACK_S = 0.005
VALGRIND_SLOWDOWN = 60
"""How many times slower a run is under callgrind, at most (its time limit there)."""
VALGRIND_ARGS = (
    "valgrind",
    "--tool=callgrind",
    # Every process the program starts is counted; options come from this command line only,
    # so a child cannot quiet or switch off its valgrind through VALGRIND_OPTS or .valgrindrc.
    "--trace-children=yes",
    "--command-line-only=yes",
)
_VALGRIND_LINE = re.compile(r"^==(\d+)== (Command: |I\s+refs:\s+([\d,]+))", re.MULTILINE)


def note_run(verdict: Verdict, cpus: int, result: SandboxResult, timed: bool) -> None:
    """Integrity findings of one of the candidate's runs: processes left behind, and (on timed
    wall-clock runs) more CPU time than ``cpus`` over the run's wall time."""
    if result.stragglers_killed:
        verdict.flag("processes", "the candidate left processes running after it exited (killed)")
    budget = cpus * result.wall_s * CPU_SLACK + CPU_SLACK_S
    if timed and result.cpu_s > budget:
        verdict.flag(
            "parallel",
            f"the candidate used {result.cpu_s:.3f} CPU-seconds in {result.wall_s:.3f} s "
            f"of wall time; the task's budget is {cpus} CPU",
        )


@dataclass
class Counted:
    result: SandboxResult
    instructions: int | None
    """Instructions of every process of the run; None when some were not counted."""
    lost: str = ""
    """Why the count is incomplete (a process replaced itself, was killed, or went quiet)."""


def count_instructions(result: SandboxResult, log: str) -> Counted:
    """Sum callgrind's totals over every process of a run, and check that none is missing.

    Each valgrind start writes a ``Command:`` line under its process id, and each process that
    ends normally writes its total. A process that replaced itself with ``exec`` (its counts
    before the exec are lost), one killed before its end, or one whose valgrind did not report,
    leaves a ``Command:`` line with no total under its id: the run's count is not the whole work.
    """
    starts: dict[str, int] = {}
    totals: dict[str, int] = {}
    instructions = 0
    for match in _VALGRIND_LINE.finditer(log):
        pid = match.group(1)
        if match.group(2).startswith("Command"):
            starts[pid] = starts.get(pid, 0) + 1
        else:
            totals[pid] = totals.get(pid, 0) + 1
            instructions += int(match.group(3).replace(",", ""))
    if not totals:
        return Counted(result, None, "no process reported an instruction count")
    short = [pid for pid, count in starts.items() if totals.get(pid, 0) < count]
    if short:
        return Counted(
            result,
            None,
            f"{len(short)} process(es) ended without a count (an exec replaced the program, "
            "or a process was killed): their instructions were not all seen",
        )
    return Counted(result, instructions)


@functools.cache
def python_paths(modules: tuple[str, ...] = ()) -> list[Path]:
    """The interpreter's installation (the user's Python environment, read-only) and the
    packages of ``modules`` wherever each is installed, none inside another."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for module in modules:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            paths.add(Path(spec.origin).resolve().parent.parent)
    kept: list[Path] = []
    for path in sorted(paths, key=lambda item: len(item.parts)):
        if not any(path.is_relative_to(parent) for parent in kept):
            kept.append(path)
    return kept
