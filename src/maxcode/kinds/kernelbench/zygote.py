"""Zygotes: one sandboxed process per side for a whole evaluation, which imports torch once and
forks that side's worker for each round (worker ``zygote.serve``).

Why. A round needs fresh worker processes (``rounds.py``: a bias that lasts a process is
sampled only by new ones), and a fresh worker that imports torch spends seconds of CPU on the
timing CPU: most of a round's start-up. A forked worker is a new process (its own pages from
its first write, its own heap from there, its own layout shift) and
draws the process bias afresh as a fresh interpreter does (``benchmarks/process_bias.py``), so
rounds after the first start in a fraction of a second.

Isolation is the sandbox's: one zygote per side, started in that side's sandbox (its uid, its
namespaces, its limits) and never serving another program; the candidate's rounds are forked
from a process no code of the candidate's ran in. A round's worker cannot reach its zygote (not
dumpable, no capabilities), and whatever a round leaves behind is the zygote's to kill before
it answers (its subreaper), so no process of a round survives into the next. What a worker's
round leaves in its folder stays there: each round has a folder of its own, and the parent
removes it after reading it. What a zygote cannot give a round: a fresh draw of what is fixed
before torch loads (the stack's start and torch's libraries, drawn per pair of zygotes) and of
Python's hash seed; so an evaluation starts a fresh pair for each ``ROUNDS_PER_PAIR`` rounds.

A zygote's answer (the round's wait status, wall and CPU time, peak memory) is read as the
init's status line for a run (``sandbox.reported_result``). A zygote that does not answer
within the round's time, or is gone, ends the round as a run killed at its limit would.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxcode.harness.sandbox import (
    Sandbox,
    SandboxResult,
    head_and_tail,
    kill_group,
    make_scratch,
    reported_result,
)
from maxcode.kinds.kernelbench.channel import Conversation
from maxcode.kinds.kernelbench.problem import KernelBenchTask
from maxcode.kinds.kernelbench.runner import (
    Job,
    Ran,
    Seeds,
    WorkerRunner,
    cache_folder,
    read_side,
)
from maxcode.kinds.kernelbench.settings import KernelBenchSettings
from maxcode.kinds.kernelbench.worker.protocol import ZYGOTE, WorkerSpec

ROUNDS_PER_PAIR = 8
"""Rounds forked from one pair of zygotes; an evaluation of more starts a fresh pair for each
eight (``evaluator.evaluate_kernelbench``). What a zygote fixes for its forks (torch's libraries
and the stack where its layout draw put them, the pages its imports landed on) is a draw
shared by all of them, which more rounds from the same pair do not sample: evaluations of many
rounds from one pair spread more than their rounds' own spread allows
(``docs/measurements/kernelbench-notes.md``)."""
_ANSWER_SLACK_S = 10.0
"""Seconds a zygote may take past a round's time limit to answer (kill, sweep, reap)."""
_CLOSE_S = 5.0
"""Seconds a zygote may take to end once its socket is closed, before it is killed."""
_ANSWER_BYTES = 1 << 16


class Zygote:
    """One side's zygote: started with ``runner`` (its job folder, sandbox, CPU and the
    evaluation's layout draw), ``role``'s build folder ``cache`` writable, for at most
    ``wall_s`` in all; ``run`` forks a round's worker, ``close`` ends it."""

    def __init__(self, runner: WorkerRunner, role: str, cache: Path, wall_s: float) -> None:
        self.runner, self.role, self.cache = runner, role, cache
        self.workdir = make_scratch(f"maxcode-kb-{role}-")
        self._control, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._root: int | None = None
        self.forked = 0
        """Rounds' workers forked so far."""
        self.ended: SandboxResult | None = None
        """The zygote's own run, once it is over."""
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._live, args=(wall_s,), name=f"maxcode-zygote-{role}", daemon=True
        )
        self._thread.start()

    def _live(self, wall_s: float) -> None:
        try:
            self.ended = self.runner.launch(
                ZYGOTE,
                self.workdir,
                self.cache,
                self._theirs.fileno(),
                wall_s,
                on_start=self._started,
            )
        except BaseException as error:  # the sandbox could not run it: the round's to raise
            self._error = error
        finally:
            self._drop_theirs()

    def _started(self, pid: int) -> None:
        self._root = pid
        # The zygote holds its end now: with ours gone, its death is our socket's end.
        self._drop_theirs()

    def _drop_theirs(self) -> None:
        if self._theirs.fileno() != -1:
            self._theirs.close()

    def run(self, spec: WorkerSpec, conversation: Conversation, wall_s: float, layout: int) -> Ran:
        """One round's worker of this side: ``spec`` (the round's seeds), ``conversation`` on
        its descriptor 3, killed after ``wall_s``, its layout shifted by ``layout``."""
        self.forked += 1
        name = f"{self.role}-{self.forked}"
        spec_path = self.runner.write_spec(self.role, spec, name)
        folder = self.workdir / name
        limits = self.runner.limits(wall_s)
        order = {
            "spec": str(spec_path),
            "folder": str(folder),
            "layout": layout,
            "wall_s": wall_s,
            "cpu_s": limits.cpu_rlimit,
        }
        answer: dict[str, Any] | None = None
        try:
            self._wait_started()
            if self._error is not None:
                raise self._error
            if self._root is not None:
                conversation.started(self._root, forked=True)
            try:
                payload = json.dumps(order).encode()
                socket.send_fds(self._control, [payload], [conversation.worker_fd])
                self._control.settimeout(wall_s + _ANSWER_SLACK_S)
                raw = self._control.recv(_ANSWER_BYTES)
                answer = json.loads(raw) if raw else None
            except (OSError, ValueError):  # no answer in time (socket.timeout), or garbled
                answer = None
        finally:
            conversation.close()
        stdout = _read_bytes(folder / "stdout", limits.file_size_bytes)
        stderr = head_and_tail(folder / "stderr") if (folder / "stderr").is_file() else ""
        try:
            if isinstance(answer, dict) and "status" in answer:
                isolation = self.runner.sandbox.isolation
                result = reported_result(answer, limits, stdout, stderr, isolation)
                return read_side(folder, result, conversation)
            # Without the zygote's account of the round (its time, its CPU, what it left),
            # what the worker reported is not evidence, however complete it looks.
            side = read_side(folder, self._lost(wall_s, stdout, stderr), conversation)
            side.problem = side.problem or f"the {self.role}'s zygote did not answer"
            return side
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # what the round wrote, read

    def _wait_started(self) -> None:
        """Until the sandbox started the zygote (or its run is already over)."""
        while self._root is None and self._thread.is_alive():
            self._thread.join(timeout=0.01)

    def _lost(self, wall_s: float, stdout: bytes, stderr: str) -> SandboxResult:
        """The round's result when its zygote did not answer (gone, or silent past the round's
        time): the zygote is ended, and the round reads as its run did (killed at a limit, or
        by a signal), else as killed at its time limit."""
        self.close(remove=False)
        ended = self.ended
        if ended is not None and (ended.limit_hit is not None or ended.signal is not None):
            return dataclasses.replace(
                ended, stdout=stdout, stderr=(stderr + "\n" + ended.stderr).strip()
            )
        return SandboxResult(
            exit_code=None,
            signal=signal.SIGKILL,
            limit_hit="wall",
            wall_s=wall_s,
            cpu_s=0.0,
            max_rss_kb=0,
            stdout=stdout,
            stderr=stderr,
            isolation=self.runner.sandbox.isolation,
        )

    def close(self, remove: bool = True) -> None:
        """End the zygote (its socket closed; killed if it does not end), and with
        ``remove`` its folder."""
        if self._control.fileno() != -1:
            self._control.close()
        self._thread.join(timeout=_CLOSE_S)
        if self._thread.is_alive() and self._root is not None:
            kill_group(self._root)
            self._thread.join()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)


def pair_wall_s(timeout_s: float, settings: KernelBenchSettings) -> float:
    """How long a pair of zygotes may live: each round it serves may take both sides' timeouts
    (``timeout_s``, the task's) and the timing budget; it serves ``ROUNDS_PER_PAIR`` rounds, or
    the evaluation's cap and one more (a round held for confirmation) when that is fewer."""
    served = min(settings.round_cap + 1, ROUNDS_PER_PAIR)
    return served * (2 * timeout_s + settings.budget_s) + _ANSWER_SLACK_S


def _read_bytes(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


@dataclass
class Zygotes:
    """The two sides' zygotes of one evaluation, and the job folder they read (each round
    writes its own spec files there, with its own seeds: ``Job.again``)."""

    job: Job
    reference: Zygote
    candidate: Zygote

    @classmethod
    def start(
        cls,
        task: KernelBenchTask,
        candidate: str,
        settings: KernelBenchSettings,
        sandbox: Sandbox,
        cpu: int | None,
        paths: list[Path],
    ) -> Zygotes:
        """Both zygotes, started together on ``cpu`` (as a round's two workers are), for the
        rounds one pair serves: ``ROUNDS_PER_PAIR``, or fewer when the evaluation's cap (and one
        more: a round held for confirmation) is below it. Their wall limit is sized for those
        rounds, so a pair that outlives them is killed."""
        job = Job.write(task, candidate)
        layout = Seeds.fresh().layout  # the evaluation's: the stack and torch's libraries
        runner = WorkerRunner(sandbox, task, settings, job.folder, paths, cpu, layout)
        wall_s = pair_wall_s(task.timeout_s, settings)
        reference = Zygote(runner, "reference", cache_folder("ref", task.reference), wall_s)
        return cls(
            job, reference, Zygote(runner, "candidate", cache_folder("cand", candidate), wall_s)
        )

    @property
    def rounds(self) -> int:
        """Rounds forked so far."""
        return self.reference.forked

    def side(self, role: str) -> Zygote:
        return self.reference if role == "reference" else self.candidate

    def close(self) -> None:
        self.reference.close()
        self.candidate.close()
        self.job.remove()
