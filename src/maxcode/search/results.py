"""What a run reports as its result: the speedup its final re-verification confirmed, with the
unverified best beside it. Used by ``optimize``, ``runs``, ``bench`` and ``report`` alike; it
reads the store only (no loop, no executor), so reports import it freely."""

from __future__ import annotations

from dataclasses import dataclass

from maxcode.store import RunRecord, RunStore
from maxcode.types import Feedback


def confirms(feedback: Feedback) -> bool:
    """A re-verification confirms a program when it is correct again, nothing voided the
    measurement (a suspect verdict confirms nothing) and it is again faster than the
    reference: a program re-measured at or below 1x is not a result (the reference stands)."""
    return feedback.correct and feedback.suspect is None and feedback.speedup > 1.0


def refutation(feedback: Feedback) -> str:
    """Why a re-verification confirmed nothing (empty when it confirmed)."""
    if confirms(feedback):
        return ""
    if feedback.correct and feedback.suspect is None:
        return f"re-measured at {feedback.speedup:.2f}x, no faster than the reference"
    return feedback.summary()


@dataclass(frozen=True)
class RunResult:
    """A run's result as reported."""

    speedup: float
    """The verified speedup when the run was re-verified (1.0: the reference stands), else
    the unverified best."""
    unverified: float
    """The best reward the search measured, as today's integrity policy judges it."""
    verified: bool
    """``speedup`` was confirmed by a re-verification (or there was nothing to confirm)."""
    node: str | None
    """The node reported (None: the reference)."""
    correct: bool
    """A correct program stands as the result (verified ones: confirmed), or, for a run not
    verified, one was found."""


def run_result(store: RunStore, record: RunRecord) -> RunResult:
    """The result of one run from what the store holds."""
    rewards = store.evaluation_rewards(record.run_id)
    unverified = min(record.best_speedup, max([1.0, *rewards]))
    found_correct = any(reward > 0 for reward in rewards)
    checks = store.verifications(record.run_id)
    if checks:
        confirmed = next(((node, f) for node, f in checks if confirms(f)), None)
        if confirmed is None:
            return RunResult(1.0, unverified, True, None, False)
        return RunResult(confirmed[1].speedup, unverified, True, confirmed[0], True)
    if record.config.get("verify", True) and record.status == "done" and unverified <= 1:
        # Nothing faster than the reference to verify: the reference stands.
        return RunResult(1.0, unverified, True, None, found_correct)
    node = record.best_node_id if unverified > 1 else None
    return RunResult(unverified, unverified, False, node, found_correct)


def run_isolation(record: RunRecord) -> str:
    """The level a run's candidates ran under (a run stored before it was recorded: its
    configuration's setting)."""
    return record.isolation or str(record.config.get("isolation") or "")
