"""How a KernelBench evaluation checks and times: the settings a caller picks
(``KernelBenchSettings``) and the fixed parameters, each with the measurement behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maxcode.harness.settings import EvalSettings, kernel_backend
from maxcode.harness.turns import timing_budget_s

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.schedule import Stopping

DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per output dtype; other floating types get 1e-2; integers and bools are exact."""
CHECK_SEEDS = 3
WARMUP_SEEDS = 3
CHUNK = 1024
"""Timed calls per chunk at most."""
CHUNK_S = 0.015
"""Seconds of calls a chunk aims at: long enough that a chunk's few messages through the
parent are a few percent of its span, short enough that a pair's two chunks run in the same
state of the machine (``docs/measurements/kernelbench-notes.md``)."""
CHUNK_SPAN_S = 0.05
"""Seconds a side's turn aims at, at most, with making the inputs and sending the outputs."""
CHUNK_BYTES = 64 << 20
"""Bytes of inputs and outputs a chunk may hold (its inputs are all made before its calls)."""
MIN_PAIRS = 8
"""Pairs of chunks timed before the interval may stop the timing: one of a few pairs can look
narrow by chance (``docs/measurements/kernelbench-notes.md``)."""
TARGET = 0.02
"""Timing stops once the speedup's 95% interval lies within +-2% of it."""
PROCESS_BIAS = 0.02
"""Standard deviation of the log speedup of a bias that lasts a whole worker process, added to
every interval: pairs cannot shrink it (``docs/measurements/kernelbench-notes.md``)."""
OUTSIDE_BIAS = 0.065
"""Spread (relative to the reference's time) of a bias that lasts a whole worker process in
the time outside the calls, added to its interval (``judge``): one process can make its inputs
steadily slower than the other (``docs/measurements/kernelbench-notes.md``)."""
WARMUP_S = 0.3
"""Seconds of warm-up (calls and inputs) after which a worker stops, at two calls or more."""
KEEP_BYTES = 256 << 20
"""Outputs of timed calls kept for checking, per program: all of them when they fit."""
SAMPLED_OUTPUTS = 16
"""Timed calls checked when not all outputs fit (drawn by the parent, never named)."""
MAX_TRIALS = 100_000
"""More timed calls than a worker may ask for (a bound on a malformed plan)."""


@dataclass(frozen=True)
class KernelBenchSettings:
    """How one KernelBench evaluation checks and times (defaults by device)."""

    device: str = "cpu"
    trials: int | None = None
    """Timed calls per program; None: until the speedup's interval is narrow (``TARGET``),
    within the device's bounds and ``budget_s``."""
    compile_baseline: bool = False
    """Also time the reference under ``torch.compile``."""
    tolerance: float | None = None
    """atol = rtol for floating outputs; None: by dtype (``DEFAULT_TOLERANCE``)."""
    budget_s: float = 2.0
    """Seconds of the timing window (both programs) after which adaptive timing stops."""
    profile: bool = False
    compile_only: bool = False
    """Only compile the candidate's extensions (nvcc for CUDA): nothing run, no reward."""
    backend: str | None = None
    """The candidates' kernel language: ``cuda``, ``triton``, ``cpp``; None: ``cuda`` on a GPU,
    ``cpp`` (C++ extensions) on a CPU."""
    rounds: int = 1
    """Timing windows, each with a fresh pair of workers (``rounds``)."""
    most_rounds: int | None = None
    """Rounds may go on up to this many while their interval is wide; None: exactly
    ``rounds``."""
    precision: float | None = None
    """How narrow rounds added past ``rounds`` make the interval, as a share of the estimate
    (None: ``rounds.REPORTED_PRECISION``)."""
    check_scale: float | None = None
    """Also check a correct candidate, untimed, at shapes scaled by this (``shapes``)."""
    check_only: bool = False
    """Check the candidate's outputs and time nothing (the round at ``check_scale``)."""
    bar: float | None = None
    """A search's screen (``schedule.Stopping.bar``)."""

    @classmethod
    def of(
        cls,
        settings: EvalSettings,
        *,
        reported: bool = False,
        rounds: int | None = None,
        compile_only: bool = False,
        bar: float | None = None,
        precision: float | None = None,
    ) -> KernelBenchSettings:
        """One evaluation's settings from the user's: a screen runs one round; a reported
        number ``rounds``, else ``rounds.reported_rounds``."""
        from maxcode.kinds.kernelbench.rounds import reported_rounds

        least, most = (
            reported_rounds(adaptive=settings.repeats is None)
            if reported and rounds is None
            else (rounds or 1, None)
        )
        return cls(
            device=settings.device,
            trials=settings.repeats,
            compile_baseline=settings.compile_baseline,
            tolerance=settings.tolerance,
            compile_only=compile_only,
            profile=bool(settings.profile),
            backend=settings.backend,
            rounds=least,
            most_rounds=most,
            precision=precision,
            check_scale=settings.check_scale,
            bar=bar,
        )

    @property
    def round_cap(self) -> int:
        """The most rounds an evaluation runs, beside one held for confirmation."""
        return max(self.rounds, self.most_rounds or self.rounds)

    def kernel_backend(self) -> str:
        return kernel_backend(self.backend, self.device)

    @property
    def timed(self) -> bool:
        """Whether candidates are timed (not Triton's interpreter, on a CPU)."""
        interpreted = self.kernel_backend() == "triton" and self.device != "cuda"
        return not (interpreted or self.check_only)

    def worker_timing(self) -> dict[str, Any]:
        return {
            "warmup": 10 if self.device == "cuda" else 3,
            "warmup_s": WARMUP_S,
            "chunk_calls": CHUNK,
            "chunk_bytes": CHUNK_BYTES,
        }

    def stopping(self) -> Stopping:
        """How many timed calls: CUDA at least 100, as KernelBench; ``MAXCODE_TIMING_BUDGET_S``
        caps the window's seconds."""
        from maxcode.kinds.kernelbench.schedule import Stopping

        low, high = (100, 20_000) if self.device == "cuda" else (10, 20_000)
        budget = min(self.budget_s, timing_budget_s())
        return Stopping(self.trials, low, high, budget, bar=self.bar)
