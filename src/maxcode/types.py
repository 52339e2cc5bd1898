"""Records that cross module borders: what an evaluation found.

A ``Feedback`` is what the harness says about one candidate. The search stores it, the critic
LLM reads it, ``maxcode eval --json`` prints it. It is bounded in size: excerpts and output
tails are cut, so that a candidate printing a gigabyte cannot flood a prompt or a store row.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

FEEDBACK_SCHEMA_VERSION = 2
"""2: ``device``, ``timings``, ``speedup_vs_compile``, ``shape_scale``, ``profiles``
(KernelBench); ``cpp_profile``, ``profile_seconds``."""

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
    hidden: bool = False
    """A held-out test: its detail is never shown (only that it failed)."""


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


class OperatorShare(_Record):
    """One operator or kernel in a profile."""

    name: str
    """Its name as the profiler gives it (``aten::addmm``, a CUDA kernel's name)."""
    share: float
    """Its share of the forward's own time (0 to 1)."""
    calls: float
    """How often it runs per forward."""


class ForwardProfile(_Record):
    """Where one forward's time goes (``torch.profiler``), for the critic; never the reward."""

    clock: str
    """Whose time the shares are of: ``cpu``, or ``cuda`` (kernel time on the GPU)."""
    top: list[OperatorShare]
    """The operators (CPU) or kernels (CUDA) with the largest own time, largest first."""
    launches: float
    """Kernel launches (CUDA) or top-level operators (CPU) per forward."""
    allocated_bytes: int
    """Bytes allocated per forward."""

    def summary(self, count: int = 3) -> str:
        """One line: the top operators with their shares, launches, memory."""
        top = ", ".join(f"{op.name} {op.share:.0%}" for op in self.top[:count]) or "nothing"
        unit = "kernels" if self.clock == "cuda" else "operators"
        return (
            f"{top}; {self.launches:.0f} {unit} per call; "
            f"{self.allocated_bytes / 1e6:.2f} MB allocated"
        )


class HotLine(_Record):
    """One source line of a C++ candidate in its profile."""

    line: int
    """Line number in the candidate's source."""
    share: float
    """Its share of all instructions the program executed (0 to 1)."""
    text: str
    """The line itself (cut to 80 characters)."""
    l1_misses: int = 0
    """First-level data-cache misses on this line (reads and writes)."""


class FunctionShare(_Record):
    """One function of a C++ candidate in its profile."""

    name: str
    """The function's name as valgrind reports it."""
    share: float
    """Its share of all instructions (its own, not its callees')."""


class CppProfile(_Record):
    """Where a C++ candidate's instructions go (valgrind callgrind with cache simulation, on its
    costliest test), for the critic; never the reward."""

    instructions: int
    """Instructions the whole program executed."""
    hot_lines: list[HotLine]
    """The candidate's source lines with the most instructions, most first."""
    functions: list[FunctionShare]
    """The functions with the most instructions of their own, most first."""
    l1_miss_rate: float | None = None
    """First-level data-cache misses per data access (None when not simulated)."""
    last_level_miss_rate: float | None = None
    """Last-level data-cache misses per data access (None when not simulated)."""
    missing_lines: list[HotLine] = []
    """The lines with the most first-level data-cache misses, most first."""

    def summary(self, count: int = 3) -> str:
        """One line: the hottest source lines and the miss rates."""
        hot = ", ".join(f"line {line.line} {line.share:.0%}" for line in self.hot_lines[:count])
        text = f"instructions in {hot or 'library code'}"
        if self.l1_miss_rate is not None:
            text += f"; L1 miss rate {self.l1_miss_rate:.1%}"
        return text


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
    profiles: dict[str, ForwardProfile] = {}
    """KernelBench, when profiling was asked for: ``reference`` and ``candidate`` forwards."""
    cpp_profile: CppProfile | None = None
    """C++, when profiling was asked for and the candidate is correct: its hot lines."""
    profile_seconds: float | None = None
    """Time spent collecting the profile(s), when asked for."""

    def summary(self) -> str:
        """One line for logs and trajectories."""
        if not self.compiled:
            return "did not compile"
        if not self.correct:
            what = self.error.message.splitlines()[0] if self.error else "wrong"
            return f"incorrect ({self.tests_passed}/{self.tests_total} tests): {what}"
        line = f"correct, {self.speedup:.2f}x ({self.metric})"
        if self.cpp_profile is not None and self.cpp_profile.hot_lines:
            hottest = self.cpp_profile.hot_lines[0]
            line += f"; hottest line {hottest.line} ({hottest.share:.0%} of instructions)"
        profile = self.profiles.get("candidate")
        if profile is not None and profile.top:
            line += "; time in " + ", ".join(f"{op.name} {op.share:.0%}" for op in profile.top[:2])
        return line
