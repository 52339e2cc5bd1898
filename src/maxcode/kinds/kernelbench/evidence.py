"""What a worker hands the parent, as typed records: its report (``WorkerReport``), the
messages on descriptor 3 (``Ready`` ... ``Checked``), and what one run left (``Ran``). All of it
comes from a process that ran the candidate's code: a record that does not validate is an
``evidence`` finding (void), never a crash of the parent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from maxcode.harness.sandbox import SandboxResult
from maxcode.kinds.kernelbench.parameters import CHECK_SEEDS, MAX_TRIALS
from maxcode.kinds.kernelbench.worker.protocol import Phase

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.listener import Conversation

Stage = Literal["ok", "compile_error", "load_error", "init_error", "runtime_error", "channel_error"]


class _Evidence(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class WorkerReport(_Evidence):
    """The worker's report of one run (``result.json``)."""

    stage: Stage
    """How far the run got: ok, or the stage that failed."""
    role: str
    """reference, candidate, build, kernels or compile_check."""
    message: str = ""
    detail: str = ""
    """The failure's traceback or compiler output, bounded."""
    aliased: list[int] = []
    """Check seeds whose output shared memory with an input."""
    threads_before: int | None = None
    threads_after: int | None = None
    """Threads of the process before and after the timed calls."""
    torch_threads_before: int | None = None
    torch_threads_after: int | None = None
    """torch's intra-op thread count before and after the timed calls."""
    times: dict[str, list[float]] = {}
    """In-process seconds of every timed call, per phase (eager, candidate, overhead, compile)."""
    profile: dict[str, Any] | None = None
    """One forward under ``torch.profiler`` (validated where it is used)."""
    profile_seconds: float | None = None
    roofline: dict[str, Any] | None = None
    """The reference's work and this device's rates (validated where it is used)."""
    roofline_error: str | None = None
    """Why the roofline could not be measured."""
    checked: list[str] = []
    """Extensions compiled by a compile check."""
    stages: dict[str, float] = {}
    """Seconds of the worker's stages by its own clock (informational, never judged)."""
    triton: dict[str, Any] | None = None
    """A Triton candidate's kernel launches (validated where it is used)."""

    @field_validator("times")
    @classmethod
    def _finite(cls, times: dict[str, list[float]]) -> dict[str, list[float]]:
        for samples in times.values():
            if any(not math.isfinite(value) or value < 0 for value in samples):
                raise ValueError("a timing is negative or not finite")
        return times


class LaunchCount(_Evidence):
    """A Triton candidate's kernel launches (``WorkerReport.triton``)."""

    checked: list[int]
    """Launches of the candidate's own kernels in each checked forward."""
    timed: int | None
    """Launches over all timed calls (None when nothing was timed)."""
    timed_calls: int
    other: int = 0
    """Launches of kernels the candidate's file does not define."""
    intact: bool
    """Whether the counting wrappers were still Triton's entry points at the end."""


@dataclass
class Ran:
    """What one worker run left (its outputs went to the round's comparers)."""

    report: WorkerReport | None
    """None when the worker left no report, or a malformed one (``problem`` says which)."""
    checked: bool
    sandbox: SandboxResult
    conversation: Conversation | None
    problem: str | None = None
    """Why the report or the tensors are missing or malformed (an ``evidence`` finding)."""
    collected: str = ""
    """The text of a file the run was asked to leave (ncu's log), bounded."""

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.stage == "ok" and self.checked

    @classmethod
    def read(cls, workdir: Path, result: SandboxResult, conversation: Conversation | None) -> Ran:
        report = _read_report(workdir / "result.json")
        if isinstance(report, str):
            return cls(None, False, result, conversation, problem=report)
        if report is None or report.stage != "ok" or report.role not in ("reference", "candidate"):
            return cls(report, False, result, conversation)
        if conversation is None or not conversation.checked:
            missing = "the worker sent no checked tensors"
            return cls(report, False, result, conversation, problem=missing)
        return cls(report, True, result, conversation)


def _read_report(path: Path) -> WorkerReport | str | None:
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


class Loaded(_Evidence):
    """Torch is imported and nothing of the task yet (the first message): the parent moves the
    worker to the one CPU it does the task's work on until its timed chunks."""

    m: Literal["loaded"]


class Ready(_Evidence):
    """The model is built and warmed up (after ``loaded``)."""

    m: Literal["ready"]
    estimate_s: float = Field(ge=0, allow_inf_nan=False)
    """Seconds of one warmed-up call (the reference's sizes the chunks of both sides)."""
    output_bytes: int = Field(ge=0)
    input_bytes: int = Field(default=0, ge=0)
    inputs_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Seconds of making one call's inputs."""


class _OfChunk(_Evidence):
    phase: Phase
    chunk: int = Field(ge=0)


class Next(_OfChunk):
    """Asks for the seeds of a chunk's calls (none: the phase is over)."""

    m: Literal["next"]


class Marker(_OfChunk):
    """Before a chunk's calls."""

    m: Literal["begin"]


class End(_OfChunk):
    """After a chunk's calls, with the in-process seconds of each."""

    m: Literal["end"]
    times: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(max_length=MAX_TRIALS)


class TensorHeader(_Evidence):
    """One tensor in the memory files sent with its message (``outputs.SealedFiles``)."""

    dtype: str
    shape: list[Annotated[int, Field(ge=0)]]
    nbytes: int = Field(ge=0)
    at: int = Field(ge=0)


class OutputItem(_Evidence):
    """The outputs of one timed call (``position`` in its chunk)."""

    position: int = Field(ge=0)
    tensors: list[TensorHeader]
    reused: bool = False
    """A later call returned this output's buffer (the worker's word: it only words a wrong
    output)."""


class Outputs(_OfChunk):
    """Every timed call's outputs after a chunk, in the memory files sent with it."""

    m: Literal["outputs"]
    items: list[OutputItem]
    files: int = Field(ge=0)


class CheckedItem(_Evidence):
    """The tensors of one check seed under one key (``outputs.KEYS``)."""

    key: Literal["check", "again", "after"]
    seed: int = Field(ge=0, lt=CHECK_SEEDS)
    tensors: list[TensorHeader]


class Checked(_Evidence):
    """The checked calls' tensors of one check seed, each key once, in the memory files sent
    with the message."""

    m: Literal["checked"]
    seed: int = Field(ge=0, lt=CHECK_SEEDS)
    items: list[CheckedItem] = Field(max_length=3)
    files: int = Field(ge=0)


AnyMessage = Loaded | Ready | Next | Marker | End | Outputs | Checked
Message = Annotated[AnyMessage, Field(discriminator="m")]
MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def parse_message(line: bytes) -> AnyMessage:
    """One message (raises ValueError when it is not one the conversation knows)."""
    try:
        return MESSAGE.validate_json(line)
    except ValidationError as error:
        raise ValueError(f"a malformed message ({first_line(error)})") from None
