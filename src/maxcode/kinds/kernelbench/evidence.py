"""What a worker hands the parent, as typed records: its report (``result.json``) and the
messages of the conversation on descriptor 3 (its checked tensors among them, ``Checked``,
whose bytes lie in memory files sent with the message: ``shared``).

Everything here comes from a process that ran the candidate's code, so nothing is trusted: a
record that does not validate is an ``evidence`` finding (the measurement is void), never a
crash of the parent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from maxcode.kinds.kernelbench.settings import CHECK_SEEDS, MAX_TRIALS
from maxcode.kinds.kernelbench.worker.protocol import Phase

Stage = Literal[
    "ok",
    "compile_error",
    "load_error",
    "init_error",
    "runtime_error",
    "channel_error",
]


class _Evidence(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class WorkerReport(_Evidence):
    """The worker's report of one run (``result.json``)."""

    stage: Stage
    """How far the run got: ok, or the stage that failed."""
    role: str
    """reference, candidate, build, kernels or compile_check."""
    message: str = ""
    """The failure, one line (when the stage is not ok)."""
    detail: str = ""
    """The failure's traceback or compiler output, bounded."""
    aliased: list[int] = []
    """Check seeds whose output shared memory with an input."""
    threads_before: int | None = None
    """Threads of the process before the timed calls."""
    threads_after: int | None = None
    """Threads of the process after the timed calls."""
    torch_threads_before: int | None = None
    """torch's intra-op thread count before the timed calls."""
    torch_threads_after: int | None = None
    """torch's intra-op thread count after the timed calls."""
    times: dict[str, list[float]] = {}
    """In-process seconds of every timed call, per phase (eager, candidate, overhead, compile)."""
    profile: dict[str, Any] | None = None
    """One forward under ``torch.profiler`` (validated where it is used)."""
    profile_seconds: float | None = None
    """Seconds the profile took."""
    roofline: dict[str, Any] | None = None
    """The reference's work and this device's rates (validated where it is used)."""
    roofline_error: str | None = None
    """Why the roofline could not be measured."""
    checked: list[str] = []
    """Extensions compiled by a compile check."""
    stages: dict[str, float] = {}
    """Seconds of the worker's own stages by its own clock (``torch``, ``load``: the problem and
    the candidate imported, ``model``, ``warmup``, ...). Informational, never judged."""
    triton: dict[str, Any] | None = None
    """A Triton candidate's kernel launches (validated where it is used)."""

    @field_validator("times")
    @classmethod
    def _finite(cls, times: dict[str, list[float]]) -> dict[str, list[float]]:
        for samples in times.values():
            if any(not math.isfinite(value) or value < 0 for value in samples):
                raise ValueError("a timing is negative or not finite")
        return times


def read_report(path: Path) -> WorkerReport | str | None:
    """The report, the reason it is malformed, or None when the worker left none."""
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        return WorkerReport.model_validate(raw)
    except (json.JSONDecodeError, ValidationError) as error:
        return f"the worker's report is malformed ({first_line(error)})"


def first_line(error: Exception) -> str:
    """The error's first line, bounded (its type's name when it says nothing)."""
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


# The conversation on descriptor 3, worker to parent.


class Ready(_Evidence):
    """The model is built and warmed up."""

    m: Literal["ready"]
    estimate_s: float = Field(ge=0, allow_inf_nan=False)
    """Seconds of one warmed-up call (the reference's sizes the chunks of both sides)."""
    output_bytes: int = Field(ge=0)
    """Bytes of one call's outputs."""
    input_bytes: int = Field(default=0, ge=0)
    """Bytes of one call's inputs (a chunk's inputs are all made before its calls)."""
    inputs_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Seconds of making one call's inputs (with the call, what a chunk's span is made of)."""


class Next(_Evidence):
    """Asks for the seeds of a chunk's calls (the parent answers when it is this side's turn;
    no seeds: the phase is over)."""

    m: Literal["next"]
    phase: Phase
    chunk: int = Field(ge=0)


class Marker(_Evidence):
    """Before a chunk's calls."""

    m: Literal["begin"]
    phase: Phase
    chunk: int = Field(ge=0)


class End(_Evidence):
    """After a chunk's calls, with the in-process seconds of each."""

    m: Literal["end"]
    phase: Phase
    chunk: int = Field(ge=0)
    times: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(max_length=MAX_TRIALS)


class TensorHeader(_Evidence):
    """One tensor in the memory files sent with its message (``shared``)."""

    dtype: str
    shape: list[Annotated[int, Field(ge=0)]]
    nbytes: int = Field(ge=0)
    at: int = Field(ge=0)
    """Its position in the files' concatenation."""


class OutputItem(_Evidence):
    """The outputs of one timed call the parent asked for."""

    position: int = Field(ge=0)
    """The call's place in its chunk."""
    tensors: list[TensorHeader]
    reused: bool = False
    """A later call of the chunk returned this call's output buffer again (the worker's
    word: it only changes how a wrong output is worded)."""


class Outputs(_Evidence):
    """Every timed call's outputs after a chunk, in the memory files sent with it."""

    m: Literal["outputs"]
    phase: Phase
    chunk: int = Field(ge=0)
    items: list[OutputItem]
    files: int = Field(ge=0)
    """Memory files sent with the message."""


class CheckedItem(_Evidence):
    """The tensors of one check seed under one key: ``check`` (its first call's outputs),
    ``again`` (its second call's), ``after`` (its inputs after the call; [] when the call left
    them as they were made)."""

    key: Literal["check", "again", "after"]
    seed: int = Field(ge=0, lt=CHECK_SEEDS)
    tensors: list[TensorHeader]


class Checked(_Evidence):
    """The checked calls' tensors of one check seed, each key once, in the memory files sent
    with the message; the seeds come in order."""

    m: Literal["checked"]
    seed: int = Field(ge=0, lt=CHECK_SEEDS)
    items: list[CheckedItem] = Field(max_length=3)
    files: int = Field(ge=0)
    """Memory files sent with the message."""


AnyMessage = Ready | Next | Marker | End | Outputs | Checked
Message = Annotated[AnyMessage, Field(discriminator="m")]
MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def parse_message(line: bytes) -> AnyMessage:
    """One message (raises ValueError when it is not one the conversation knows)."""
    try:
        return MESSAGE.validate_json(line)
    except ValidationError as error:
        raise ValueError(f"a malformed message ({first_line(error)})") from None
