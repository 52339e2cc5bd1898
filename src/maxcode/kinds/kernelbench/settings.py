"""How a KernelBench evaluation checks and times: the settings a caller picks, the constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maxcode.harness.settings import EvalSettings, kernel_backend

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.schedule import Stopping

DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per output dtype; other floating types get 1e-2; integers and bools are exact."""
CHECK_SEEDS = 3
WARMUP_SEEDS = 3
CHUNK = 1024
"""Timed calls per chunk at most: the parent sends a chunk's seeds just before it and stamps
it; the two workers take turns chunk by chunk. Each chunk costs a few messages through the
parent (a millisecond or more on a loaded machine) inside its span: chunks of a few tiny calls
spend more on them than on the calls, and that noise hides work moved outside the calls.
Chunks of ``CHUNK_S`` keep it to a few percent."""
CHUNK_S = 0.015
"""Seconds of calls a chunk aims at (slow calls make chunks of fewer calls, down to one).

Short, so that the two chunks of a pair run in the same state of the machine: a worker's calls
can turn markedly slower or faster for a few hundred milliseconds at a time, on either side, and a
pair that such a change falls between is off by that much
(``docs/measurements/kernelbench-notes.md``). More pairs, each cheaper, also reach a narrow interval
sooner (``benchmarks/chunk_size.py`` compares sizes)."""
CHUNK_SPAN_S = 0.05
"""Seconds a side's turn aims at, at most: its calls, making their inputs and sending their
outputs (slow to make, tiny calls spend most of a turn outside the calls). ``CHUNK_S`` alone
lets a chunk of such calls hold hundreds of them and a side's turn last most of a second."""
CHUNK_BYTES = 64 << 20
"""Bytes of inputs and outputs a chunk may hold: a chunk's inputs are all made before its
first call, so large inputs with quick calls would otherwise hold hundreds of MiB."""
MIN_PAIRS = 8
"""Pairs of chunks (one per side) timed before the interval may stop the timing. An interval
from three or four log ratios (the warm-up pair left out) can look narrow by chance, and a
window that stops on it keeps that lucky draw (``docs/measurements/kernelbench-notes.md``). Short
chunks make the extra pairs cheap; calls slow enough for one-call chunks take ``Stopping.min_calls``
anyway."""
TARGET = 0.02
"""Timing stops once the speedup's 95% interval lies within +-2% of it."""
PROCESS_BIAS = 0.02
"""Spread (standard deviation of the log speedup) of a bias that lasts a whole worker process,
added to every KernelBench interval: a ratio between two processes that pairing cannot cancel
and more pairs cannot shrink. It is the spread fitted to identical candidates of the public
level-1/2 problems, whose intervals from pairs alone miss 1.0 far more often than 5%, with each
round's workers drawing their address layout afresh (worker ``layout.fix_layout``; the figures:
``docs/measurements/kernelbench-notes.md``). C++ and project timings start a process per round, so
their intervals already sample it."""
OUTSIDE_BIAS = 0.065
"""Spread (relative to the reference's time) of a bias that lasts a whole worker process in
the time outside the calls (``judge``'s outside excess), added to its interval. Making a
call's inputs is the same work on both sides, but not at the same speed in two processes:
where the inputs take many times the call, one side can make them steadily slower or faster
(by the worker's CPU clock too), which the pairs alone would call sure and charge to an
identical candidate (``docs/measurements/kernelbench-notes.md``). Hidden work below about 13% of
making the inputs is then not sure: it is charged to the interval's low end (what selection uses)
only."""
WARMUP_S = 0.3
"""Seconds of warm-up (its calls and the making of their inputs) after which a worker stops
warming up (after two calls at least)."""
KEEP_BYTES = 256 << 20
"""Outputs of timed calls kept for checking, per program: all of them when they fit."""
SAMPLED_OUTPUTS = 16
"""Timed calls checked when not all outputs fit (a sample the parent draws, named to the
worker only after the calls ran)."""
MAX_TRIALS = 100_000
"""More timed calls than a worker may ask for (a bound on a malformed plan)."""


@dataclass(frozen=True)
class KernelBenchSettings:
    """How one KernelBench evaluation checks and times (defaults by device)."""

    device: str = "cpu"
    """cpu or cuda."""
    trials: int | None = None
    """Timed calls per program; None: until the speedup's interval is narrow (``TARGET``),
    within the device's bounds and ``budget_s``."""
    compile_baseline: bool = False
    """Also time the reference under ``torch.compile``."""
    tolerance: float | None = None
    """atol = rtol for floating outputs; None: by dtype (``DEFAULT_TOLERANCE``)."""
    budget_s: float = 2.0
    """Seconds of the timing window (both programs, alternated) after which timing stops when
    ``trials`` is None, unless the speedup's interval was narrow earlier."""
    profile: bool = False
    """Profile one forward of the reference and of the candidate (``torch.profiler``)."""
    compile_only: bool = False
    """Only compile the candidate's extensions (nvcc for CUDA sources): no GPU needed, nothing
    run, no reward."""
    backend: str | None = None
    """The candidates' kernel language: ``cuda``, ``triton``, ``cpp``; None: ``cuda`` on a GPU,
    ``cpp`` (C++ extensions) on a CPU."""
    rounds: int = 1
    """Timing windows, each with a fresh pair of workers, combined into one speedup
    (``rounds.py``): one screens a search's candidates, ``rounds.REPORTED_ROUNDS`` for a
    speedup that is reported."""
    most_rounds: int | None = None
    """Rounds may go on past ``rounds``, up to this many, while their speedups scatter
    (``rounds.scattered``); None: exactly ``rounds``."""
    check_scale: float | None = None
    """Also check a correct candidate at these other shapes (the problem's sizes times this,
    as ``--scale`` would make them; untimed): wrong there is a ``shapes`` warning."""
    check_only: bool = False
    """Check the candidate's outputs and time nothing (the round at ``check_scale``)."""
    bar: float | None = None
    """A search's screen: a round's timed calls stop once the candidate is clearly below this
    reward (``schedule.Stopping.bar``)."""

    @classmethod
    def of(
        cls,
        settings: EvalSettings,
        *,
        reported: bool = False,
        rounds: int | None = None,
        compile_only: bool = False,
        bar: float | None = None,
    ) -> KernelBenchSettings:
        """One evaluation's settings from the user's (``settings.device`` resolved): a screen
        runs one round; a reported number ``rounds`` when given, else
        ``rounds.reported_rounds``, going on while they scatter unless ``repeats`` is set."""
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
            check_scale=settings.check_scale,
            bar=bar,
        )

    @property
    def round_cap(self) -> int:
        """The most rounds an evaluation runs, beside one held for confirmation."""
        return max(self.rounds, self.most_rounds or self.rounds)

    def kernel_backend(self) -> str:
        """The backend in effect (``backend`` resolved by device)."""
        return kernel_backend(self.backend, self.device)

    @property
    def timed(self) -> bool:
        """Whether candidates are timed: a Triton candidate on a CPU runs in Triton's
        interpreter, which checks correctness but says nothing about speed."""
        interpreted = self.kernel_backend() == "triton" and self.device != "cuda"
        return not (interpreted or self.check_only)

    def worker_timing(self) -> dict[str, Any]:
        """The worker's timing settings (how the calls are timed is the parent's to say)."""
        return {
            "warmup": 10 if self.device == "cuda" else 3,
            "warmup_s": WARMUP_S,
            "chunk_calls": CHUNK,
            "chunk_bytes": CHUNK_BYTES,
        }

    def stopping(self) -> Stopping:
        """How many timed calls: CUDA takes at least 100, as KernelBench does; the timing
        window's seconds are also capped by ``MAXCODE_TIMING_BUDGET_S`` (as a C++ program's)."""
        from maxcode.harness.turns import timing_budget_s
        from maxcode.kinds.kernelbench.schedule import Stopping

        low, high = (100, 20_000) if self.device == "cuda" else (10, 20_000)
        budget = min(self.budget_s, timing_budget_s())
        return Stopping(self.trials, low, high, budget, bar=self.bar)
