"""Records that cross module borders: what an evaluation found.

A ``Feedback`` is what the harness says about one candidate. The search stores it, the critic
LLM reads it, ``maxcode eval --json`` prints it. It is bounded in size: excerpts and output
tails are cut, so that a candidate printing a gigabyte cannot flood a prompt or a store row.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

FEEDBACK_SCHEMA_VERSION = 8
"""2: ``device``, ``timings``, ``speedup_vs_compile``, ``shape_scale``, ``profiles``
(KernelBench); ``cpp_profile``, ``profile_seconds``. 3: ``roofline``, ``kernel_metrics``,
``kernel_metrics_note`` (KernelBench). 4: ``suspect``, ``claimed_speedup`` (the integrity
policy: a void finding takes the reward). 5: ``speedup_interval``, ``phases``, ``backend``;
metric ``printed`` (project tasks). 6: ``rounds`` (KernelBench). 7: ``per_round``
(KernelBench). 8: the KernelBench-only keys under ``kernelbench`` (``KernelBenchDetails``),
``cpp_profile`` as ``cpp.profile`` (``CppDetails``); older verdicts are read by moving them
there."""

TestStatus = Literal[
    "passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit"
]
Metric = Literal["wall", "instructions", "printed"]
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


class Roofline(_Record):
    """The task's speed of light: the least time its work can take on this machine.

    Work is counted on the reference: FLOPs of its matrix products and convolutions
    (``torch.utils.flop_counter``), and the bytes a perfectly fused program still moves (inputs,
    weights and outputs, each once). Rates are measured on the same device in the same process:
    a large matrix product in the task's dtype, and the better of a copy and a sum (on a GPU over
    512 MiB, past the L2 cache the timed calls flush; on a CPU over the task's own bytes, since
    its fresh inputs sit in the caches).
    """

    flops: int
    """Floating-point operations of one forward (matrix products and convolutions only)."""
    bytes: int
    """Bytes of the inputs, parameters and outputs of one forward."""
    flop_rate: float
    """Measured FLOP/s of a large matrix product in the task's dtype."""
    byte_rate: float
    """Measured bytes/s of the better of a copy (read and write counted) and a sum."""
    floor_s: float
    """The speed of light: max(flops / flop_rate, bytes / byte_rate), in seconds."""
    memory_floor_s: float
    """bytes / byte_rate: no program can beat this without skipping inputs or outputs."""
    fraction: float | None = None
    """The candidate's share of the speed of light (floor_s / its median time; 1: at it)."""
    capped: bool = False
    """The candidate claimed to beat the memory floor by more than ``ROOFLINE_SLACK``, and its
    reward was capped there (CUDA, where caches are flushed before each timed call)."""

    def bound(self) -> str:
        """memory or compute: which of the two floors sets the speed of light."""
        if self.flop_rate <= 0:
            return "memory"
        return "compute" if self.flops / self.flop_rate > self.memory_floor_s else "memory"

    def summary(self) -> str:
        """One line: the floor, what sets it, and how close the candidate is."""
        line = (
            f"speed of light {self.floor_s * 1e3:.4f} ms ({self.bound()}-bound: "
            f"{self.bytes / 1e6:.2f} MB at {self.byte_rate / 1e9:.0f} GB/s, "
            f"{self.flops / 1e9:.3f} GFLOP at {self.flop_rate / 1e12:.2f} TFLOP/s)"
        )
        if self.fraction is not None:
            line += f"; candidate at {self.fraction:.0%} of it"
        return line


class KernelMetrics(_Record):
    """One GPU kernel of the candidate's forward, as Nsight Compute measured it."""

    name: str
    """The kernel's name (cut to 120 characters)."""
    launches: int
    """Launches of this kernel in one forward."""
    duration_s: float
    """GPU time of all its launches in one forward (under ncu, clocks not locked)."""
    occupancy: float | None = None
    """Achieved occupancy: active warps as a share of the SM's maximum (0 to 1)."""
    memory_throughput: float | None = None
    """Memory throughput as a share of the device's peak (0 to 1)."""
    compute_throughput: float | None = None
    """SM (compute) throughput as a share of the device's peak (0 to 1)."""
    dram_bytes: int | None = None
    """Bytes read from and written to device memory by all its launches."""
    library: bool = False
    """A kernel of PyTorch or a vendor library rather than the candidate's own code."""

    def summary(self) -> str:
        """One line: name, time, and the three throughput figures."""
        parts = [f"{self.name[:60]}: {self.duration_s * 1e6:.1f} us"]
        for label, value in (
            ("occupancy", self.occupancy),
            ("memory", self.memory_throughput),
            ("compute", self.compute_throughput),
        ):
            if value is not None:
                parts.append(f"{label} {value:.0%}")
        return ", ".join(parts)


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


class RoundSpeedup(_Record):
    """One KernelBench round's own result, before the rounds are combined."""

    speedup: float
    interval: tuple[float, float] | None = None
    """Its 95% interval (None: too few pairs for one)."""
    reference_s: float | None = None
    """The reference's median timed call in the round (seconds, in its process); None when
    untimed."""
    candidate_s: float | None = None
    """The candidate's, likewise: which side moved when rounds lean (a ratio alone cannot
    tell)."""


class KernelBenchDetails(_Record):
    """What a KernelBench evaluation found beside the verdict (``Feedback.kernelbench``)."""

    backend: str = ""
    """The candidate's kernel language (cuda, cpp, triton)."""
    rounds: int = 0
    """Timing windows combined, each with a fresh pair of worker processes
    (``maxcode.kinds.kernelbench.rounds``)."""
    per_round: list[RoundSpeedup] = []
    """Each round's own speedup and interval, in the order run (a round set aside included);
    what ``speedup`` combines, kept to show how far the rounds agree."""
    timings: dict[str, TimingStats] = {}
    """Per-call timings of ``reference`` (eager), ``candidate``, ``harness`` (an identity model
    timed the same way: the fixed cost in every call) and, when measured, ``compile`` (the
    reference under ``torch.compile``)."""
    speedup_vs_compile: float | None = None
    """The ``torch.compile`` baseline's cost / the candidate's, when measured."""
    shape_scale: float | None = None
    """The factor the problem's shape constants were scaled by (1: as written)."""
    roofline: Roofline | None = None
    """The task's speed of light and the candidate's share of it."""
    kernel_metrics: list[KernelMetrics] = []
    """On CUDA with profiling and Nsight Compute: the forward's kernels."""
    kernel_metrics_note: str = ""
    """Why ``kernel_metrics`` is empty when profiling asked for it (no ncu, no permission)."""

    def describe(self, device: str, repeats: int) -> list[str]:
        """What the policy and the critic read of a correct candidate beside the verdict: the
        per-call times of the reference, the candidate and ``torch.compile`` on ``device``
        (medians of ``repeats`` calls), the kernels' metrics, the roofline."""
        lines = []
        if self.timings:
            lines.append(self._describe_timings(device, repeats))
        if self.kernel_metrics:
            lines.append(
                "Kernels of the candidate's forward (Nsight Compute; occupancy and throughput as "
                "shares of peak): "
                + "; ".join(
                    kernel.summary() + (" [library]" if kernel.library else "")
                    for kernel in self.kernel_metrics[:5]
                )
                + "."
            )
        elif self.kernel_metrics_note:
            lines.append(f"Kernel metrics: {self.kernel_metrics_note}.")
        if self.roofline is not None:
            lines.append(f"Roofline: {self.roofline.summary()}.")
        return lines

    def _describe_timings(self, device: str, repeats: int) -> str:
        parts = []
        labels = {"reference": "eager", "candidate": "candidate", "compile": "compile"}
        for name, label in labels.items():
            stats = self.timings.get(name)
            if stats is not None:
                median, spread = stats.median_s * 1e3, stats.spread_s * 1e3
                parts.append(f"{label} {median:.4g} ms (±{spread:.2g})")
        line = f"Per call on {device}, median of {repeats}: " + ", ".join(parts)
        if self.speedup_vs_compile is not None:
            line += f"; {self.speedup_vs_compile:.2f}x against torch.compile"
        harness = self.timings.get("harness")
        if harness is not None:
            line += (
                f"; every timed call includes {harness.median_s * 1e3:.4g} ms of fixed harness "
                "cost (an identity model timed the same way)"
            )
        return line + "."

    def summary(self) -> str:
        """What ``Feedback.summary`` adds for a correct candidate: its own first kernel's
        throughputs and its share of the speed of light."""
        line = ""
        own = [kernel for kernel in self.kernel_metrics if not kernel.library]
        if own and own[0].memory_throughput is not None and own[0].compute_throughput is not None:
            line += (
                f"; kernel {own[0].name[:40]} at {own[0].memory_throughput:.0%} memory, "
                f"{own[0].compute_throughput:.0%} compute"
            )
        if self.roofline is not None and self.roofline.fraction is not None:
            line += f"; {self.roofline.fraction:.0%} of the speed of light"
        return line


class CppDetails(_Record):
    """What a C++ evaluation found beside the verdict (``Feedback.cpp``)."""

    profile: CppProfile | None = None
    """When profiling was asked for and the candidate is correct: where its instructions go."""

    def describe(self) -> list[str]:
        """What the policy and the critic read beside the verdict: the hottest source lines
        with their instruction shares, the functions, the caches."""
        profile = self.profile
        if profile is None:
            return []
        hot = "; ".join(f"line {h.line} `{h.text}` {h.share:.0%}" for h in profile.hot_lines[:4])
        lines = [f"Where the instructions go (callgrind, costliest test): {hot or 'library code'}."]
        functions = ", ".join(f"{f.name} {f.share:.0%}" for f in profile.functions[:3])
        if functions:
            lines.append(f"Functions (own instructions): {functions}.")
        if profile.l1_miss_rate is not None and profile.last_level_miss_rate is not None:
            cache = (
                f"Data cache: L1 miss rate {profile.l1_miss_rate:.1%}, "
                f"last level {profile.last_level_miss_rate:.2%}"
            )
            if profile.missing_lines:
                worst = profile.missing_lines[0]
                cache += f"; most L1 misses on line {worst.line} ({worst.l1_misses:,})"
            lines.append(cache + ".")
        return ["\n".join(lines)]


_LEGACY_KERNELBENCH = tuple(KernelBenchDetails.model_fields)
"""The keys a verdict of schema 7 or older held at its top level for KernelBench."""


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
    """What the costs measure: seconds of wall time, instructions executed, or a cost the
    task's own bench command printed (project tasks)."""
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
    """Integrity findings, ``"category: message"`` (``maxcode.harness.integrity`` says which
    categories void the reward and which only warn); empty when none."""
    suspect: str | None = None
    """The void finding that took the reward: the measurement cannot be trusted (speedup 0,
    never the best, never verified, never counted); None for a clean verdict."""
    claimed_speedup: float | None = None
    """What the candidate measured before a void finding took it (None when not suspect)."""
    speedup_interval: tuple[float, float] | None = None
    """95% confidence interval (low, high) of ``speedup`` from the paired timed trials; both
    ends equal for a deterministic metric (instructions); None when nothing was timed."""
    phases: dict[str, float] = {}
    """Seconds each phase of the evaluation took (start-up, build, checks, timing, judging,
    ...): where an evaluation's cost goes."""
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
    profiles: dict[str, ForwardProfile] = {}
    """When profiling was asked for: the ``reference`` and ``candidate`` forwards (KernelBench)
    or benches (projects)."""
    profile_seconds: float | None = None
    """Time spent collecting the profile(s), when asked for."""
    kernelbench: KernelBenchDetails | None = None
    """KernelBench: what the evaluation found beside the verdict (rounds, per-call timings, the
    roofline, ...); None for other kinds."""
    cpp: CppDetails | None = None
    """C++: what the evaluation found beside the verdict (the profile); None for other kinds."""

    def with_kernelbench(self, **changes: Any) -> Feedback:
        """This verdict with ``changes`` to its KernelBench details (made when it had none)."""
        details = self.kernelbench or KernelBenchDetails()
        changed = KernelBenchDetails.model_validate({**details.model_dump(), **changes})
        return self.model_copy(update={"kernelbench": changed})

    @model_validator(mode="before")
    @classmethod
    def _details_of_older_layouts(cls, data: Any) -> Any:
        """A verdict laid out as schema 7 or older (a stored row, an earlier ``eval --json``):
        its KernelBench-only keys move under ``kernelbench`` (kept when any says something),
        ``cpp_profile`` under ``cpp``."""
        if not isinstance(data, dict) or not (set(data) & {*_LEGACY_KERNELBENCH, "cpp_profile"}):
            return data
        data = dict(data)
        legacy = {key: data.pop(key) for key in _LEGACY_KERNELBENCH if key in data}
        if any(value not in (None, "", 0, [], {}) for value in legacy.values()):
            data["kernelbench"] = legacy
        profile = data.pop("cpp_profile", None)
        if profile is not None:
            data["cpp"] = {"profile": profile}
        data["schema_version"] = FEEDBACK_SCHEMA_VERSION
        return data

    @property
    def reward(self) -> float:
        """What the search maximizes for this verdict, and what the store records: 0 unless
        correct and not suspect; else the low end of the speedup's interval when it has one (a
        conservative bound: a lucky draw of an equal program scores about 1.0 or less), else the
        speedup."""
        if not self.correct or self.suspect is not None:
            return 0.0
        if self.speedup_interval is not None:
            return min(self.speedup, self.speedup_interval[0])
        return self.speedup

    def summary(self) -> str:
        """One line for logs and trajectories."""
        if not self.compiled:
            return "did not compile"
        if self.suspect is not None:
            claimed = f" (measured {self.claimed_speedup:.2f}x)" if self.claimed_speedup else ""
            return f"suspect, no reward{claimed}: {self.suspect}"
        if not self.correct:
            what = self.error.message.splitlines()[0] if self.error else "wrong"
            return f"incorrect ({self.tests_passed}/{self.tests_total} tests): {what}"
        line = f"correct, {self.speedup:.2f}x ({self.metric})"
        low, high = self.speedup_interval or (self.speedup, self.speedup)
        if low != high:
            line = f"correct, {self.speedup:.2f}x (95% CI {low:.2f}-{high:.2f}, {self.metric})"
        if self.cpp is not None and self.cpp.profile is not None and self.cpp.profile.hot_lines:
            hottest = self.cpp.profile.hot_lines[0]
            line += f"; hottest line {hottest.line} ({hottest.share:.0%} of instructions)"
        profile = self.profiles.get("candidate")
        if profile is not None and profile.top:
            line += "; time in " + ", ".join(f"{op.name} {op.share:.0%}" for op in profile.top[:2])
        if self.kernelbench is not None:
            line += self.kernelbench.summary()
        return line
