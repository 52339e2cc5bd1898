"""The default executor: evaluations on this machine, a few at a time.

Each evaluation already runs its programs in sandboxed subprocesses, so a thread per
evaluation slot is enough here. Every slot pins its timed runs to a CPU of its own, so that
two evaluations never time on the same core. KernelBench rounds on a GPU take the GPU one at a
time (runner ``device_turn``); the extensions of a candidate are built before it queues for the
GPU, so with ``--workers N`` the next candidates build on the CPUs while one is timed.
"""

from __future__ import annotations

import asyncio

from maxcode.executors.base import EvalJob, Executor, sandbox_for
from maxcode.harness.sandbox import Sandbox
from maxcode.harness.turns import usable_cpus
from maxcode.kinds import prebuild_task
from maxcode.types import Feedback


class LocalExecutor(Executor):
    """Evaluations in this process's threads, at most ``workers`` at once. Each job names its
    sandbox (level and opt-in); ``sandbox``, when given, is used for every job instead."""

    def __init__(self, workers: int = 1, sandbox: Sandbox | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.sandbox = sandbox
        cpus = usable_cpus()
        # The last CPUs for timing, one per slot, leaving the first to this process when we can.
        spare = cpus[1:] if len(cpus) > workers else cpus
        self._free: list[int | None] = [spare[-(slot % len(spare)) - 1] for slot in range(workers)]
        self._slots: asyncio.Semaphore | None = None

    async def setup(self) -> None:
        self._slots = asyncio.Semaphore(self.workers)

    def _sandbox(self, job: EvalJob) -> Sandbox:
        return self.sandbox or sandbox_for(*job.sandbox_key())

    def _evaluate(self, job: EvalJob, cpu: int | None) -> Feedback:
        return job.run(self._sandbox(job), cpu)

    async def evaluate(self, job: EvalJob) -> Feedback:
        if self._slots is None:
            # Used without ``setup`` (not entered): make the limit at once, with no await
            # between the check and the assignment, so concurrent callers share it.
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            cpu = self._free.pop()
            try:
                if job.settings.device != "cuda":
                    return await asyncio.to_thread(self._evaluate, job, cpu)
                # One GPU: the candidate's extensions build on the CPUs first, while another
                # evaluation may be timed.
                failed = await asyncio.to_thread(
                    prebuild_task,
                    job.task,
                    job.source,
                    device=job.settings.device,
                    sandbox=self._sandbox(job),
                )
                if failed is not None:
                    return failed
                # Each round then takes the GPU in turn (runner ``device_turn``, across threads
                # and processes alike).
                return await asyncio.to_thread(self._evaluate, job, cpu)
            finally:
                self._free.append(cpu)
