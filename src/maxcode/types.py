"""Records that cross module borders: what an evaluation found.

A ``Feedback`` is what the harness says about one candidate. The search stores it, the critic
LLM reads it, ``maxcode eval --json`` prints it. It is bounded in size: excerpts and output
tails are cut, so that a candidate printing a gigabyte cannot flood a prompt or a store row.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

FEEDBACK_SCHEMA_VERSION = 2
"""2: ``device``, ``timings``, ``speedup_vs_compile``, ``shape_scale`` (KernelBench)."""

TestStatus = Literal[
    "passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit"
]
Metric = Literal["wall", "instructions"]
ErrorKind = Literal[
    "compile_error", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit"
]


class _Record(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class ErrorInfo(_Record):
    """Why a candidate earned no reward."""

    kind: ErrorKind
    """What went wrong first: compile error, a wrong answer, a crash, a limit hit."""
    message: str
    """One or a few lines a person (or the critic) can act on."""


class TestOutcome(_Record):
    """What happened on one test case."""

    index: int
    """The test's number (``input.<index>.txt``)."""
    status: TestStatus
    """passed, or how it failed."""
    detail: str = ""
    """For a wrong answer: the first differing line, expected against got; for a crash: the
    signal or exit code and the end of stderr. Bounded."""
    signal: int | None = None
    """The signal that ended the program, when one did."""
    exit_code: int | None = None
    """The program's exit code, when it exited."""
    seconds: float | None = None
    """Wall time of the correctness run, sandbox start-up excluded."""


class TimingStats(_Record):
    """How one program's timed calls went (KernelBench)."""

    median_s: float
    """Median seconds per call, measured in the sandboxed process."""
    spread_s: float
    """Interquartile range of the per-call seconds."""
    trials: int
    """Timed calls (after warm-up)."""
    host_s: float | None = None
    """Seconds per call as the parent saw them (time stamps it took itself), less the harness's
    own overhead per call; None when not measured."""


class Feedback(_Record):
    """The harness's verdict on one candidate against its task's reference."""

    schema_version: int = FEEDBACK_SCHEMA_VERSION
    """Version of this record's layout."""
    task: str
    """The task's name."""
    compiled: bool
    """The candidate built."""
    correct: bool
    """Every test passed (every run of every test, timed runs included)."""
    speedup: float
    """Reference cost / candidate cost when compiled and correct, else 0 (the reward)."""
    metric: Metric
    """What the costs measure: seconds of wall time, or instructions executed."""
    reference_cost: float | None
    """Reference cost summed over the tests (seconds or instructions)."""
    candidate_cost: float | None
    """Candidate cost summed over the tests; None when it was not measured."""
    tests_passed: int
    """Tests the candidate passed."""
    tests_total: int
    """Tests in the task."""
    error: ErrorInfo | None = None
    """Null when correct; otherwise the first problem found."""
    flags: list[str] = []
    """Integrity findings (implausible speedup, weak isolation, ...); empty when none."""
    tests: list[TestOutcome] = []
    """Per-test outcomes, in test order (stops after the first failing test is detailed)."""
    compile_output: str = ""
    """Compiler diagnostics (bounded), with line numbers; empty when clean."""
    isolation: str = ""
    """The sandbox used for the candidate: bwrap, unshare, or rlimits."""
    reference_costs: list[float] = []
    """Per-test reference cost (median of the timed runs, or instruction count)."""
    candidate_costs: list[float] = []
    """Per-test candidate cost, same order and unit."""
    repeats: int = 0
    """Timed runs per test and program (wall metric; warm-up excluded)."""
    candidate_sha256: str = ""
    """Content hash of the candidate source."""
    device: str = "cpu"
    """Where the programs ran: cpu or cuda."""
    timings: dict[str, TimingStats] = {}
    """KernelBench: per-call timings of ``reference`` (eager), ``candidate`` and, when measured,
    ``compile`` (the reference under ``torch.compile``)."""
    speedup_vs_compile: float | None = None
    """KernelBench: the ``torch.compile`` baseline's cost / the candidate's, when measured."""
    shape_scale: float | None = None
    """KernelBench: the factor the problem's shape constants were scaled by (1: as written)."""

    def summary(self) -> str:
        """One line for logs and trajectories."""
        if not self.compiled:
            return "did not compile"
        if not self.correct:
            what = self.error.message.splitlines()[0] if self.error else "wrong"
            return f"incorrect ({self.tests_passed}/{self.tests_total} tests): {what}"
        return f"correct, {self.speedup:.2f}x ({self.metric})"
