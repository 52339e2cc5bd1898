"""Scripted stand-ins for the search's collaborators: a policy that answers from a list and an
executor that reads each candidate's reward from a marker line. The loop talks only to
these interfaces, so tree shapes and value rankings can be tested without timing noise."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from maxcode.executors import EvalJob, Executor
from maxcode.harness.integrity import apply_policy
from maxcode.kinds.load import load_task
from maxcode.llm import ProviderSettings, ScriptedProvider
from maxcode.llm._scripted import Reply
from maxcode.search import Search, SearchConfig, TemplateCritic, make_method
from maxcode.store import RunStore
from maxcode.types import ErrorInfo, Feedback
from tests.helpers import write_task

MARKER = re.compile(r"#pragma candidate (\d+) reward ([\d.]+)")
AGAIN = re.compile(r"#pragma judged again ([\d.]+)")
SUSPECT = re.compile(r"#pragma void (\S+: .*)")
SUSPECT_AGAIN = "#pragma void when judged again"
INTERVAL = re.compile(r"#pragma interval ([\d.]+) ([\d.]+)")
INTERVAL_AGAIN = re.compile(r"#pragma interval again ([\d.]+) ([\d.]+)")


class ScriptedExecutor(Executor):
    """Feedback from the candidate's ``#pragma candidate N reward R`` line (R = 0: wrong);
    from the second evaluation of the same program on, ``#pragma judged again R`` wins when
    present; ``#pragma interval LO HI`` gives the speedup that 95% interval (``#pragma interval
    again LO HI``: from the second evaluation on). A ``#pragma void CATEGORY: MESSAGE`` line
    adds that finding (the integrity policy then voids the result); ``#pragma void when judged
    again`` adds a ``processes`` finding from the second evaluation on. The marks are
    preprocessor lines, code: candidates that differ only in comments are one program to the
    search."""

    def __init__(self) -> None:
        self.jobs: list[EvalJob] = []

    async def evaluate(self, job: EvalJob) -> Feedback:
        seen_before = any(earlier.source == job.source for earlier in self.jobs)
        self.jobs.append(job)
        match = MARKER.search(job.source)
        assert match, job.source
        again = AGAIN.search(job.source)
        reward = float(again.group(1) if seen_before and again else match.group(2))
        flags = [found.group(1) for found in SUSPECT.finditer(job.source)]
        if seen_before and SUSPECT_AGAIN in job.source:
            flags.append("processes: a child kept running when judged again")
        interval = INTERVAL_AGAIN.search(job.source) if seen_before else None
        interval = interval or INTERVAL.search(job.source)
        bounds = (float(interval.group(1)), float(interval.group(2))) if interval else None
        return feedback_of(reward, job.task.name, flags, bounds)


def feedback_of(
    reward: float,
    task: str = "sum",
    flags: list[str] | None = None,
    interval: tuple[float, float] | None = None,
) -> Feedback:
    """A verdict with the given reward (0: a wrong answer) and findings, through the policy;
    with ``interval``, a timed verdict (wall) whose speedup has that 95% interval."""
    correct = reward > 0
    return apply_policy(
        Feedback(
            task=task,
            compiled=True,
            correct=correct,
            speedup=reward,
            speedup_interval=interval if correct else None,
            metric="wall" if interval else "instructions",
            reference_cost=100.0,
            candidate_cost=100.0 / reward if correct else None,
            tests_passed=2 if correct else 1,
            tests_total=2,
            error=None if correct else ErrorInfo(kind="wrong_answer", message="test 1: wrong"),
            flags=flags or [],
        )
    )


def scripted_search(
    tmp_path: Path, replies: Iterable[Reply], bench_id: str | None = None, **settings: object
) -> tuple[RunStore, Search]:
    """A recorded run ``r1`` on a small task, with a scripted policy (its calls logged in the
    store) and a scripted executor; with ``bench_id``, a run of that bench (already created,
    labelled with the method)."""
    folder = write_task(tmp_path / "task")
    task = load_task(str(folder))
    config = SearchConfig.model_validate({"model": "scripted", **settings})
    store = RunStore(tmp_path / "runs.db")
    if bench_id is not None:
        store.create_bench(bench_id, {}, [str(folder)], [config.method], 1)
    store.create_run(
        "r1", str(folder), task.name, task.kind, config.method, config.model_dump(),
        bench_id=bench_id, bench_label=bench_id and config.method, bench_trial=bench_id and 0,
    )  # fmt: skip
    policy = ScriptedProvider(
        settings=ProviderSettings(call_log=store.call_log("r1")), replies=replies, cycle=True
    )
    search = Search(
        run_id="r1",
        task=task,
        config=config,
        store=store,
        policy=policy,
        critic=TemplateCritic(),
        executor=ScriptedExecutor(),
        method=make_method(config),
    )
    return store, search
