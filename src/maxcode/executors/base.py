"""Where evaluations run. The search talks only to this interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cache
from types import TracebackType
from typing import TYPE_CHECKING, Literal, cast

from maxcode.harness.settings import EvalSettings
from maxcode.tasks import Task
from maxcode.types import Feedback

if TYPE_CHECKING:
    from maxcode.harness.sandbox import Sandbox


@dataclass(frozen=True)
class EvalJob:
    """One candidate to judge against its task."""

    task: Task
    """The task (reference and tests)."""
    source: str
    """The candidate program."""
    settings: EvalSettings = field(default_factory=EvalSettings)
    """How it is built, checked and timed (a search's ``SearchConfig.evaluation``)."""
    reported: bool = False
    """The speedup is reported (a search's re-verification), not a screen: timed to a narrower
    interval (``evaluate_task``; KernelBench: in ``REPORTED_ROUNDS`` rounds of fresh workers,
    where a screen takes one)."""

    bar: float | None = None
    """A screen's bar: timing stops once the candidate is clearly below this reward (the
    search's ``Method.bar``; None for full precision)."""

    def sandbox_key(self) -> tuple[str, bool]:
        """What the job's sandbox is built from: ``Sandbox(level, unsafe_ok=...)``."""
        return self.settings.isolation, self.settings.unsafe_isolation

    def run(self, sandbox: Sandbox, cpu: int | None) -> Feedback:
        """Judge the candidate here, in ``sandbox``, its timed runs pinned to ``cpu``."""
        from maxcode.kinds import evaluate_task

        return evaluate_task(
            self.task,
            self.source,
            self.settings,
            sandbox=sandbox,
            cpu=cpu,
            reported=self.reported,
            bar=self.bar,
        )


@cache
def sandbox_for(isolation: str, unsafe_isolation: bool) -> Sandbox:
    """The sandbox of a level and opt-in, made once per process (``auto`` probes the machine
    once). Raises ``UnsafeIsolation`` for a level outside ``SAFE_LEVELS`` without the opt-in."""
    from maxcode.harness.sandbox import Isolation, Sandbox

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
