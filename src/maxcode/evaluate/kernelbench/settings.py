"""How a KernelBench evaluation checks and times: the settings a caller picks, the constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per output dtype; other floating types get 1e-2; integers and bools are exact."""
CHECK_SEEDS = 3
WARMUP_SEEDS = 3
CHUNK = 8
"""Timed calls per chunk: the parent sends a chunk's seeds just before it and stamps it."""
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
    """Timed calls per program; None: as many as fit ``budget_s`` within the device's bounds."""
    compile_baseline: bool = False
    """Also time the reference under ``torch.compile``."""
    tolerance: float | None = None
    """atol = rtol for floating outputs; None: by dtype (``DEFAULT_TOLERANCE``)."""
    budget_s: float = 1.0
    """Seconds of timed calls aimed at per program, when ``trials`` is None."""
    profile: bool = False
    """Profile one forward of the reference and of the candidate (``torch.profiler``)."""
    compile_only: bool = False
    """Only compile the candidate's extensions (nvcc for CUDA sources): no GPU needed, nothing
    run, no reward."""
    backend: str | None = None
    """The candidates' kernel language: ``cuda``, ``triton``, ``cpp``; None: ``cuda`` on a GPU,
    ``cpp`` (C++ extensions) on a CPU."""

    def kernel_backend(self) -> str:
        """The backend in effect (``backend`` resolved by device)."""
        return self.backend or ("cuda" if self.device == "cuda" else "cpp")

    @property
    def timed(self) -> bool:
        """Whether candidates are timed: a Triton candidate on a CPU runs in Triton's
        interpreter, which checks correctness but says nothing about speed."""
        return not (self.kernel_backend() == "triton" and self.device != "cuda")

    def worker_timing(self) -> dict[str, Any]:
        """The worker's timing settings: CUDA takes at least 100 trials, as KernelBench does."""
        cuda = self.device == "cuda"
        low, high = (100, 2000) if cuda else (10, 200)
        if self.trials is not None:
            low = high = self.trials
        return {
            "warmup": 10 if cuda else 3,
            "min_trials": low,
            "max_trials": high,
            "budget_s": self.budget_s,
            "keep_bytes": KEEP_BYTES,
            "chunk": CHUNK,
        }
