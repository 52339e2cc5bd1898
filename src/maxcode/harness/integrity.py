"""The integrity policy: every finding the harness can make, and what it costs the reward.

A finding is a flag ``"category: message"`` in ``Feedback.flags``. Its category decides its
consequence:

- ``void``: the measurement cannot be trusted. The reward is 0 (``speedup`` 0, the measured
  figure kept as ``claimed_speedup``), the verdict is ``suspect`` with the finding as its reason;
  such a result is never the best, never verified, never counted by ``bench``.
- ``warn``: shown to the critic and in reports; the reward stands.

A category missing from the table is ``void``: a new check fails closed until someone decides.
Both evaluators (C++ and KernelBench) build their verdicts through ``Verdict``, so the policy is
applied in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from maxcode.harness.sandbox import SAFE_LEVELS
from maxcode.types import ErrorInfo, ErrorKind, Feedback, Metric

Consequence = Literal["void", "warn"]

IMPLAUSIBLE_SPEEDUP = 100.0
"""Above this speedup a result is flagged for a person to look at (a warning: algorithmic
rewrites of C++ programs do reach it honestly)."""


@dataclass(frozen=True)
class Rule:
    """One row of the integrity table."""

    category: str
    """The flag's prefix, before the colon."""
    consequence: Consequence
    """void: no reward; warn: shown, reward kept."""
    meaning: str
    """What the finding says about the measurement (for the README and ``doctor``)."""


RULES: dict[str, Rule] = {
    rule.category: rule
    for rule in (
        Rule(
            "isolation",
            "void",
            "the sandbox could not keep expected outputs private and runs stateless",
        ),
        Rule(
            "unsafe-isolation",
            "warn",
            "a weaker sandbox the user accepted explicitly (--unsafe-isolation)",
        ),
        Rule(
            "processes",
            "void",
            "processes outlived the program (a daemon doing work off the clock)",
        ),
        Rule(
            "untracked",
            "void",
            "work the metric did not see (a process callgrind missed, other processes while timed)",
        ),
        Rule(
            "parallel",
            "void",
            "more CPU than the budget (CPU time of all processes vs wall; KernelBench: any "
            "while waiting for its turn)",
        ),
        Rule("threads", "void", "threads started, or torch's thread count changed, while timed"),
        Rule(
            "cpu",
            "void",
            "a thread of the candidate's process could run off the timing CPU while timed "
            "(the harness could not keep it there; KernelBench)",
        ),
        Rule(
            "memory",
            "void",
            "the candidate's process ran on memory the reference's was not given (huge pages "
            "turned back on, KernelBench)",
        ),
        Rule(
            "timing",
            "void",
            "in-process timings disagree with a clock the worker cannot touch (its CPU clock "
            "read by the parent on a CPU, the parent's host time on a GPU), or no clock evidence",
        ),
        Rule(
            "hidden",
            "void",
            "work outside the timed calls (making the inputs, between the calls, sending the "
            "outputs) surely more than the calls' own, in two rounds of fresh workers "
            "(KernelBench)",
        ),
        Rule("evidence", "void", "the worker's evidence is missing or malformed"),
        Rule("inputs", "void", "the candidate changed its inputs in place"),
        Rule("aliasing", "void", "the output shares memory with an input"),
        Rule("caching", "void", "a timed call's output differs: work skipped on repeated calls"),
        Rule(
            "reused",
            "void",
            "a timed call's output buffer was returned again by a later call, which overwrote "
            "it before it was checked (KernelBench: return a fresh tensor)",
        ),
        Rule("nondeterministic", "void", "right once, wrong on a repeated run"),
        Rule(
            "outside",
            "warn",
            "host time outside the timed calls beyond the reference's, charged to the "
            "candidate (KernelBench)",
        ),
        Rule(
            "clock",
            "warn",
            "in-process timings claim more speedup than the clock the reward counts over the "
            "same calls (KernelBench: the worker's CPU clock on a CPU, the parent's on a GPU)",
        ),
        Rule(
            "rounds",
            "warn",
            "a round set aside: its speedup far outside the other rounds', or a `hidden:` void "
            "that the next round of fresh workers did not repeat (KernelBench)",
        ),
        Rule("timing-floor", "warn", "runs so short that timer resolution matters"),
        Rule("implausible", "warn", "a speedup to check by hand (capped at the speed of light)"),
        Rule("task", "warn", "a weakness of the task itself (found on the reference)"),
        Rule("held-out", "warn", "a hidden test failed (its details withheld)"),
        Rule("compile-only", "warn", "built only; nothing was run, so no reward"),
        Rule(
            "shapes",
            "warn",
            "correct at the problem's shapes, wrong at the other shapes it was checked at "
            "(KernelBench --check-scale)",
        ),
        Rule(
            "read-only",
            "void",
            "a project candidate changed a file outside its editable files (tests, benchmark, "
            "build), or a run changed the project's files",
        ),
        Rule(
            "backend",
            "void",
            "not a result of the backend asked for (a Triton forward that launched no Triton "
            "kernel)",
        ),
        Rule(
            "interpreted",
            "warn",
            "checked for correctness in Triton's interpreter on a CPU; timed only on a GPU, so "
            "no reward",
        ),
    )
}


def finding(category: str, message: str) -> str:
    """A flag of a known category (an unknown one is a programming error)."""
    if category not in RULES:
        raise ValueError(f"unknown integrity category {category!r}")
    return f"{category}: {message}"


def category_of(flag: str) -> str:
    """The category of a flag: what stands before its first colon."""
    return flag.split(":", 1)[0].strip()


def consequence_of(flag: str) -> Consequence:
    """void or warn; a category the table does not know is void (fail closed)."""
    rule = RULES.get(category_of(flag))
    return "void" if rule is None else rule.consequence


def void_findings(flags: list[str]) -> list[str]:
    """The flags that void a measurement, in the order they were found."""
    return [flag for flag in flags if consequence_of(flag) == "void"]


def apply_policy(feedback: Feedback) -> Feedback:
    """The verdict with the policy applied: a void finding on a result that would have earned
    a reward makes it ``suspect`` with no reward. Idempotent."""
    voiding = void_findings(feedback.flags)
    if not voiding or not feedback.correct or feedback.suspect is not None:
        return feedback
    voided = feedback.model_copy(
        update={
            "suspect": voiding[0],
            "claimed_speedup": feedback.speedup,
            "speedup": 0.0,
            "speedup_interval": None,
        }
    )
    return voided.with_kernelbench(speedup_vs_compile=None) if voided.kernelbench else voided


def isolation_flags(isolation: str, accepted: bool = False) -> list[str]:
    """Findings about the sandbox level itself: ``bwrap`` and ``unshare`` keep expected
    outputs private and runs stateless; ``rlimits`` does not (void unless the user opted in)."""
    if isolation in SAFE_LEVELS:
        return []
    what = f"{isolation} only: expected outputs readable, state may survive between runs"
    if accepted:
        return [finding("unsafe-isolation", what)]
    return [finding("isolation", what + "; install bubblewrap")]


@dataclass
class Verdict:
    """What every Feedback of one evaluation shares; findings accumulate as checks fire, and
    every Feedback leaves through ``make`` with the policy applied."""

    task: str
    metric: Metric
    isolation: str
    digest: str
    tests_total: int
    flags: list[str] = field(default_factory=list)
    common: dict[str, Any] = field(default_factory=dict)
    """Further fields every verdict carries (KernelBench: the device; in ``kernelbench``, the
    shape scale and the backend, merged with what ``make`` is given there)."""

    def flag(self, category: str, message: str) -> None:
        """Record a finding (once)."""
        text = finding(category, message)
        if text not in self.flags:
            self.flags.append(text)

    def make(self, **fields: Any) -> Feedback:
        merged = {**self.common, **fields}
        for key, shared in self.common.items():  # a record's keys given in both are merged
            if isinstance(shared, dict) and isinstance(fields.get(key), dict):
                merged[key] = {**shared, **fields[key]}
        feedback = Feedback(
            task=self.task,
            metric=self.metric,
            tests_total=self.tests_total,
            isolation=self.isolation,
            candidate_sha256=self.digest,
            flags=list(dict.fromkeys(self.flags)),
            **merged,
        )
        return apply_policy(feedback)

    def failed(self, kind: ErrorKind, message: str, **fields: Any) -> Feedback:
        """A verdict with no reward: nothing is measured, ``message`` says why."""
        fields.setdefault("compiled", True)
        fields.setdefault("tests_passed", 0)
        return self.make(
            correct=False,
            speedup=0.0,
            reference_cost=None,
            candidate_cost=None,
            error=ErrorInfo(kind=kind, message=message),
            **fields,
        )

    def unmeasured(self, correct: bool, tests_passed: int, **fields: Any) -> Feedback:
        """A verdict with nothing measured and no error (compile-only, or a reference that
        failed a later run): no reward, the findings say why."""
        return self.make(
            compiled=True,
            correct=correct,
            speedup=0.0,
            reference_cost=None,
            candidate_cost=None,
            tests_passed=tests_passed,
            **fields,
        )

    def implausible(self, speedup: float, against: str = "the reference") -> None:
        if speedup > IMPLAUSIBLE_SPEEDUP:
            self.flag("implausible", f"{speedup:.0f}x faster than {against}; check it by hand")


def policy_table_markdown() -> str:
    """The integrity table as the README shows it."""
    lines = ["| finding | consequence | what it means |", "|---|---|---|"]
    for rule in RULES.values():
        lines.append(f"| `{rule.category}:` | {rule.consequence} | {rule.meaning} |")
    return "\n".join(lines)
