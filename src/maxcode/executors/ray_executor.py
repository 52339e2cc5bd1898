"""Evaluations as Ray tasks, on a local Ray instance or a cluster the user already runs.

The store stays with the driver: a Ray task only turns an ``EvalJob`` into a ``Feedback``, so a
worker that dies loses nothing recorded, and Ray runs the task again elsewhere. On every node
an evaluation claims a CPU of its own (a lock file per CPU) before it times anything, so two
evaluations never time on the same core.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.executors.base import EvalJob, Executor
from maxcode.harness.turns import usable_cpus
from maxcode.types import Feedback

RAY_INSTALL_HINT = "--executor ray needs Ray: pip install 'maxcode[ray]'"


@contextlib.contextmanager
def claim_cpu() -> Iterator[int | None]:
    """Hold one CPU of this machine for timing, waiting for one to be free; None if only
    one CPU may be used (nothing to choose)."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        yield None
        return
    folder = os.path.join(tempfile.gettempdir(), "maxcode-cpu-locks")
    os.makedirs(folder, exist_ok=True)
    while True:
        for cpu in reversed(cpus):
            handle = open(os.path.join(folder, f"cpu-{cpu}.lock"), "a+")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            try:
                yield cpu
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        # Every CPU is timing something: wait on the last one's lock.
        with open(os.path.join(folder, f"cpu-{cpus[-1]}.lock"), "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            fcntl.flock(handle, fcntl.LOCK_UN)


def evaluate_on_worker(job: EvalJob) -> Feedback:
    """What a Ray worker runs: one evaluation, timed on a CPU it holds alone, in the sandbox
    the job names (the run's level and opt-in, never a worker's own fallback)."""
    from maxcode.executors.base import sandbox_for

    sandbox = sandbox_for(*job.sandbox_key())
    with claim_cpu() as cpu:
        return job.run(sandbox, cpu)


def ray_resources(job: EvalJob) -> dict[str, float]:
    """What an evaluation asks Ray for: one CPU, and a whole GPU when it runs on CUDA, so that
    two timings never share a GPU and a CUDA evaluation never lands on a node without one
    (Ray holds it until a node with a free GPU takes it)."""
    return {"num_cpus": 1, "num_gpus": 1 if job.settings.device == "cuda" else 0}


class RayExecutor(Executor):
    """Evaluations as Ray tasks (retried on another worker when one dies)."""

    def __init__(
        self,
        workers: int | None = None,
        address: str | None = None,
        max_retries: int = 3,
    ) -> None:
        self.workers = workers
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.max_retries = max_retries
        self._started_here = False
        self._remote: Any = None
        self._slots: asyncio.Semaphore | None = None

    async def setup(self) -> None:
        try:
            import ray
        except ImportError:
            raise MaxcodeError(RAY_INSTALL_HINT) from None
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "ignore_reinit_error": True,
            }
            if self.address:
                options["address"] = self.address
            else:
                if self.workers:
                    options["num_cpus"] = self.workers
                self._started_here = True
            try:
                await asyncio.to_thread(ray.init, **options)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise MaxcodeError(f"cannot start or join Ray: {error}") from None
        capacity = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._slots = asyncio.Semaphore(capacity)
        self._remote = ray.remote(max_retries=self.max_retries)(evaluate_on_worker)

    async def evaluate(self, job: EvalJob) -> Feedback:
        if self._remote is None or self._slots is None:
            await self.setup()
        assert self._slots is not None
        async with self._slots:
            result: Feedback = await self._remote.options(**ray_resources(job)).remote(job)
            return result

    async def close(self) -> None:
        if self._started_here:
            import ray

            ray.shutdown()
            self._started_here = False
        self._remote = None
