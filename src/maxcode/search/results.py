"""What a run reports as its result: the speedup its final re-verification confirmed, with the
unverified best beside it. Used by ``optimize``, ``runs``, ``bench`` and ``report`` alike; it
reads the store only (no loop, no executor), so reports import it freely.

Noise and selection. A search keeps the best of many measurements, so it selects for lucky
draws (the winner's curse). Three rules keep a lucky draw out of a result:

- the reward the search maximizes (``reward``) is the LOW end of the speedup's 95% interval
  when the measurement has one: a program equal to the reference scores at most about 1.0, and
  a noisy draw of it wins over the reference only by the little its low end may pass 1.0;
- the final re-verification measures the best programs again, afresh, and confirms one only
  when the new interval lies wholly above 1.0 (``confirms``);
- the number reported for a verified run is that fresh measurement's estimate with its
  interval: it was not selected on, so it carries no winner's curse.

Measurements without an interval (instruction counts: exact; runs stored before intervals
existed) count at their speedup, as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from maxcode.search.config import MAXCODE_PARTS
from maxcode.store import RunDamaged, RunRecord, RunStore
from maxcode.types import Feedback


def interval_text(speedup: float, interval: tuple[float, float] | None) -> str:
    """``1.23x (95% CI 1.20-1.26)``; just ``1.23x`` without an interval or with an exact one."""
    if interval is None or interval[0] == interval[1]:
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x (95% CI {interval[0]:.2f}-{interval[1]:.2f})"


def confirms(feedback: Feedback) -> bool:
    """A re-verification confirms a program when it is correct again, nothing voided the
    measurement (a suspect verdict confirms nothing) and it is again faster than the
    reference beyond noise: the re-measured interval's low end is above 1x (without an
    interval: the speedup). A program not surely faster is no result (the reference stands)."""
    return feedback.reward > 1.0


def refutation(feedback: Feedback) -> str:
    """Why a re-verification confirmed nothing (empty when it confirmed)."""
    if confirms(feedback):
        return ""
    if feedback.correct and feedback.suspect is None:
        measured = interval_text(feedback.speedup, feedback.speedup_interval)
        if feedback.speedup > 1.0:
            return f"re-measured at {measured}, not surely faster than the reference"
        return f"re-measured at {measured}, no faster than the reference"
    return feedback.summary()


def evaluation_rewards(store: RunStore, run_id: str) -> list[float]:
    """The rewards (``Feedback.reward``) of a run's evaluations, in the order they were recorded,
    judged by today's integrity policy (a void finding of an older run's verdict takes its
    reward too)."""
    return [feedback.reward for feedback in store.evaluations(run_id)]


@dataclass(frozen=True)
class RunResult:
    """A run's result as reported."""

    speedup: float
    """The verified speedup when the run was re-verified (1.0: the reference stands): the
    estimate of the fresh measurement that confirmed it; else the unverified best reward."""
    unverified: float
    """The best reward the search measured (the low end of its interval when it has one), as
    today's integrity policy judges it."""
    verified: bool
    """``speedup`` was confirmed by a re-verification (or there was nothing to confirm)."""
    node: str | None
    """The node reported (None: the reference)."""
    correct: bool
    """A correct program stands as the result (verified ones: confirmed), or, for a run not
    verified, one was found."""
    interval: tuple[float, float] | None = None
    """The 95% interval of the measurement ``speedup`` comes from (None: the reference
    stands, or it had none)."""

    def text(self) -> str:
        """The speedup with its interval, and whether it was verified, for a person."""
        shown = interval_text(self.speedup, self.interval)
        return shown if self.verified else f"{shown}, unverified"


def run_result(store: RunStore, record: RunRecord) -> RunResult:
    """The result of one run from what the store holds."""
    evaluations = store.evaluations(record.run_id)
    rewards = [feedback.reward for feedback in evaluations]
    unverified = min(record.best_speedup, max([1.0, *rewards]))
    found_correct = any(value > 0 for value in rewards)
    checks = store.verifications(record.run_id)
    if checks:
        confirmed = next(((node, f) for node, f in checks if confirms(f)), None)
        if confirmed is None:
            return RunResult(1.0, unverified, True, None, False)
        feedback = confirmed[1]
        return RunResult(
            feedback.speedup, unverified, True, confirmed[0], True, feedback.speedup_interval
        )
    if record.config.get("verify", True) and record.status == "done" and unverified <= 1:
        # Nothing surely faster than the reference to verify: the reference stands.
        return RunResult(1.0, unverified, True, None, found_correct)
    if unverified <= 1:
        return RunResult(unverified, unverified, False, None, found_correct)
    best = max(evaluations, key=lambda feedback: feedback.reward)
    return RunResult(
        unverified, unverified, False, record.best_node_id, found_correct, best.speedup_interval
    )


def method_label(record: RunRecord) -> str:
    """The method as ``maxcode bench`` names it: the bench's label, else the search method with
    ``+maxcode`` when the run is its MaxCode variant (the observation ``--maxcode`` gives)."""
    if record.bench_label:
        return record.bench_label
    observation = record.config.get("observation")
    if observation is not None and tuple(observation) == MAXCODE_PARTS:
        return f"{record.method}+maxcode"
    return record.method


def run_isolation(record: RunRecord) -> str:
    """The level a run's candidates ran under (a run stored before it was recorded: its
    configuration's setting)."""
    return record.isolation or str(record.config.get("isolation") or "")


def runs_json(store: RunStore) -> list[dict[str, Any]]:
    """Every run in ``store`` as ``maxcode runs --json`` prints it: its record, the result it
    stands behind (``run_result``), its usage and its void results."""
    rows = []
    for run in store.list_runs():
        try:
            rows.append(_run_json(store, run))
        except RunDamaged as damage:
            # One unreadable row marks its run; the others stay listed.
            rows.append(_damaged_json(store, run, str(damage)))
    return rows


def _run_json(store: RunStore, run: RunRecord) -> dict[str, Any]:
    if run.status == "damaged":
        raise RunDamaged(f"run {run.run_id}: {run.message}")
    return {
        **_listed_json(store, run),
        "label": method_label(run),
        "status": run.status,
        **_result_json(store, run),
        "message": run.message,
        "isolation": run_isolation(run),
        "void": [result.as_json() for result in store.void_results(run.run_id)],
    }


def _damaged_json(store: RunStore, run: RunRecord, reason: str) -> dict[str, Any]:
    """A run with a row that cannot be read: status ``damaged``, the reason as its message,
    and no result claimed."""
    return {
        **_listed_json(store, run),
        "label": run.method,
        "status": "damaged",
        "speedup": None,
        "speedup_interval": None,
        "verified": False,
        "result_text": "-",
        "message": reason,
        "isolation": run.isolation,
        "void": [],
    }


def _listed_json(store: RunStore, run: RunRecord) -> dict[str, Any]:
    """What every listed run shows, readable or damaged: its record's plain fields, its
    evaluations' count and its usage."""
    return {
        "run_id": run.run_id,
        "task": run.task_name,
        "method": run.method,
        "best_speedup": run.best_speedup,
        "evaluations": store.count_evaluations(run.run_id),
        "steps": run.steps_done,
        "created_at": run.created_at,
        "unsafe_isolation": run.unsafe_isolation,
        **store.usage(run.run_id),
    }


def _result_json(store: RunStore, run: RunRecord) -> dict[str, Any]:
    """A run's reported result: the speedup it stands behind, its interval, and whether a
    re-verification confirmed it."""
    result = run_result(store, run)
    return {
        "speedup": result.speedup,
        "speedup_interval": list(result.interval) if result.interval else None,
        "verified": result.verified,
        "result_text": result.text(),
    }
