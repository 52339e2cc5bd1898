"""What the parent and the worker agree on (stdlib only: the worker imports no maxcode module):
the spec a worker run reads, the names on descriptor 3, the layout of the memory files that
carry tensors. Names are ``str`` enums, so they travel in JSON as their values."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum

CHANNEL_FD = 3
"""The worker's end of its conversation with the parent."""
ZYGOTE = "--zygote"
"""The argument that starts the worker as a side's zygote instead of one run."""
NVTX_RANGE = "maxcode_forward"
"""The NVTX range around the one forward Nsight Compute profiles (role ``kernels``)."""
SEGMENT_BYTES = 256 << 20
"""Bytes of one memory file (below a worker's file-size limit, runner ``_FILE_BYTES``)."""
ALIGN = 64
"""Alignment of each tensor's position (every dtype's, and a cache line)."""
MOST_FILES = 250
"""Memory files one message may carry (the kernel passes at most 253 descriptors at once)."""


class _Name(str, Enum):
    def __str__(self) -> str:  # the value in messages and f-strings, on every Python
        return str(self.value)


class Phase(_Name):
    """A run of timed chunks, named on the wire by one letter."""

    PAIRS = "K"
    """The program's calls, chunk by chunk in turn with the other side's (the reward)."""
    IDENTITY = "O"
    """The reference's identity model: the harness's own loop around a call."""
    COMPILE = "C"
    """``torch.compile`` of the reference (informational)."""


class Side(_Name):
    REFERENCE = "reference"
    CANDIDATE = "candidate"


class Part(_Name):
    """A part of a chunk's span outside its calls, split at its ``begin`` and ``end`` markers."""

    MAKING = "making the inputs"
    BETWEEN = "between the calls"
    SENDING = "sending the outputs"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker run reads from its spec file: no seed of a checked or timed input."""

    role: str
    """reference (``Model``, its baselines), candidate (``ModelNew``), build (import only: fills
    the build cache), kernels (one forward under Nsight Compute) or compile_check (compile
    ``load_inline`` sources, load nothing)."""
    problem: str
    candidate: str
    device: str
    init_seed: int
    """The seed of the weights (``get_init_inputs`` and the model's construction)."""
    warmup_seeds: list[int]
    overrides: dict[str, int] = field(default_factory=dict)
    """Module-level sizes of the problem and the candidate replaced at import (``--scale``)."""
    backend: str = "cuda"
    timed: bool = True
    """False: checks only (a Triton candidate interpreted on a CPU)."""
    warmup: int = 3
    warmup_s: float = float("inf")
    """Warm-up calls at most, and the seconds after which two will do."""
    chunk_calls: int = 0
    chunk_bytes: int = 0
    """The largest chunk's calls and bytes (they size the heap's reserve)."""
    profile: bool = False
    compile_baseline: bool = False
    roofline: bool = True
    segment_bytes: int = SEGMENT_BYTES
    stubs: str = ""

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> WorkerSpec:
        raw = json.loads(text)
        known = {item.name for item in fields(cls)}
        if not isinstance(raw, dict) or not set(raw) <= known:
            raise ValueError("a malformed worker spec")
        return cls(**raw)
