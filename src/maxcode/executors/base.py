"""Where evaluations run. The search talks only to this interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from types import TracebackType
from typing import TYPE_CHECKING, Literal, cast

from maxcode.tasks import Task
from maxcode.types import Feedback, Metric

if TYPE_CHECKING:
    from maxcode.evaluate import Sandbox


@dataclass(frozen=True)
class EvalJob:
    """One candidate to judge against its task."""

    task: Task
    """The task (reference and tests)."""
    source: str
    """The candidate program."""
    metric: Metric = "wall"
    """The cost to measure."""
    repeats: int | None = None
    """Timed rounds (wall metric); None for the task's own setting."""
    device: str = "cpu"
    """Where the candidate runs (KernelBench: cpu or cuda)."""
    compile_baseline: bool = False
    """KernelBench: also time the reference under ``torch.compile``."""
    tolerance: float | None = None
    """KernelBench: atol = rtol for floating outputs; None for the per-dtype defaults."""
    profile: bool = False
    """KernelBench: profile a forward of the reference and of the candidate (for the critic)."""
    isolation: str = "auto"
    """The sandbox level (``auto``, ``bwrap``, ``unshare``, ``rlimits``)."""
    unsafe_isolation: bool = False
    """The user accepted a level outside ``SAFE_LEVELS`` (``--unsafe-isolation``)."""
    backend: str | None = None
    """KernelBench: the candidates' kernel language (None: cuda on a GPU, C++ on a CPU)."""
    check_scale: float | None = None
    """KernelBench: also check a correct candidate at the problem's sizes times this."""
    reported: bool = False
    """The speedup is reported (a search's re-verification), not a screen: timed to a narrower
    interval (``evaluate_task``; KernelBench: in ``REPORTED_ROUNDS`` rounds of fresh workers,
    where a screen takes one)."""

    def sandbox_key(self) -> tuple[str, bool]:
        """What the job's sandbox is built from: ``Sandbox(level, unsafe_ok=...)``."""
        return self.isolation, self.unsafe_isolation

    def settings(self) -> dict[str, object]:
        """The keyword arguments of ``evaluate_task`` this job sets (the sandbox aside)."""
        return {
            "metric": self.metric,
            "repeats": self.repeats,
            "device": self.device,
            "compile_baseline": self.compile_baseline,
            "tolerance": self.tolerance,
            "profile": self.profile,
            "backend": self.backend,
            "check_scale": self.check_scale,
            "reported": self.reported,
        }


@cache
def sandbox_for(isolation: str, unsafe_isolation: bool) -> Sandbox:
    """The sandbox of a level and opt-in, made once per process (``auto`` probes the machine
    once). Raises ``UnsafeIsolation`` for a level outside ``SAFE_LEVELS`` without the opt-in."""
    from maxcode.evaluate import Sandbox
    from maxcode.evaluate.sandbox import Isolation

    level = cast(Isolation | Literal["auto"], isolation)
    return Sandbox(level, unsafe_ok=unsafe_isolation)


class Executor(ABC):
    """A backend that evaluates candidates: ``setup``, ``evaluate`` (many at once), ``close``."""

    async def setup(self) -> None:
        """Acquire what the backend needs (workers, a cluster connection)."""
        return None

    @abstractmethod
    async def evaluate(self, job: EvalJob) -> Feedback:
        """Judge one candidate; callers may await several at once."""

    async def close(self) -> None:
        """Release the backend's resources."""
        return None

    async def __aenter__(self) -> Executor:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
