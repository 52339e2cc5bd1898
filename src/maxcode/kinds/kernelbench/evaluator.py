"""One KernelBench evaluation, entry to verdict: ``evaluate_kernelbench`` runs its rounds
(``_one_round``: fresh seeds, both workers, checks, the timing window, the judgement) and
combines them (``rounds``); ``build_kernelbench`` builds a candidate's extensions first. The
package's docstring follows one evaluation through the modules; ``Feedback.phases`` says where
its seconds went (``PHASES``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.errors import MaxcodeError, TaskError
from maxcode.harness.integrity import finding
from maxcode.harness.sandbox import Sandbox, hidden_from_others
from maxcode.harness.turns import CpuTurn, timing_cpu
from maxcode.kinds.kernelbench import ncu, roofline, rounds
from maxcode.kinds.kernelbench.backends import check_device
from maxcode.kinds.kernelbench.evidence import Ran
from maxcode.kinds.kernelbench.headers import include_folder
from maxcode.kinds.kernelbench.judge import Judge, check_reference
from maxcode.kinds.kernelbench.listener import Conversation
from maxcode.kinds.kernelbench.outputs import Comparer
from maxcode.kinds.kernelbench.parameters import KernelBenchSettings
from maxcode.kinds.kernelbench.problem import KernelBenchTask, rescaled
from maxcode.kinds.kernelbench.runner import (
    ROUNDS_PER_PAIR,
    Job,
    WorkerRunner,
    Zygotes,
    cache_folder,
    device_turn,
    sole_user,
    worker_paths,
)
from maxcode.kinds.kernelbench.schedule import Round, TimedPlan, Turns
from maxcode.kinds.kernelbench.worker.protocol import Part, Phase, Side
from maxcode.types import Feedback, TimingStats


def build_kernelbench(
    task: KernelBenchTask,
    candidate: str,
    *,
    settings: KernelBenchSettings | None = None,
    sandbox: Sandbox | None = None,
) -> Feedback | None:
    """Build the candidate's extensions into the cache, with every CPU; the verdict when the
    build fails, None when the evaluation may go ahead."""
    settings = settings or KernelBenchSettings()
    torch = check_device(settings.device, settings.compile_only)
    sandbox = sandbox or Sandbox()
    job = Job.write(task, candidate)
    try:
        headers = include_folder(candidate)
        runner = WorkerRunner(
            sandbox, task, settings, job.folder, worker_paths(), None, headers=headers
        )
        built = runner.run("build", job.spec(task, settings), cache_folder("cand", candidate))
    finally:
        job.remove()
    if built.report is not None and built.report.stage == "ok":
        return None
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    judge = Judge.start(torch, task, settings, digest, sandbox)
    return judge.run_failure(built) or judge.verdict.failed("runtime_error", "the build failed")


def evaluate_kernelbench(
    task: KernelBenchTask,
    candidate: str,
    *,
    settings: KernelBenchSettings | None = None,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
) -> Feedback:
    """Judge ``candidate`` (Python source defining ``ModelNew``) against the task's ``Model``;
    both are pinned to ``cpu`` (None: the last CPU this process may use); the rounds are
    combined by ``rounds.Tally``."""
    settings = settings or KernelBenchSettings()
    if settings.rounds < 1:
        raise MaxcodeError(f"rounds must be at least 1 (got {settings.rounds})")
    pinned = timing_cpu() if cpu is None else cpu
    torch = check_device(settings.device, settings.compile_only, settings.backend, lazy=True)
    sandbox = sandbox or Sandbox()
    paths = worker_paths()
    if (
        sandbox.drops_uid
        and sandbox.isolation != "bwrap"
        and any(hidden_from_others(path) for path in paths)
    ):
        raise TaskError(
            "KernelBench evaluation needs bubblewrap here: the Python installation lives in a "
            "folder other users cannot enter (apt-get install bubblewrap)"
        )
    other = None
    if settings.check_scale is not None and not settings.compile_only:
        other = rescaled(task, settings.check_scale)  # before anything runs: a bad scale fails
    wanted = 1 if settings.compile_only else settings.rounds
    timed = settings.timed and not settings.compile_only
    tally = rounds.Tally(wanted, settings.round_cap if timed else wanted, settings.precision)
    later = replace(settings, compile_baseline=False, profile=False)
    headers = None if settings.compile_only else include_folder(candidate)
    machine = _Machine(sandbox, pinned, paths, torch, headers)
    pair = None
    try:
        while tally.more():
            if forks(settings) and (pair is None or pair.rounds >= ROUNDS_PER_PAIR):
                if pair is not None:
                    pair.close()
                    pair = None
                pair = Zygotes.start(task, candidate, settings, sandbox, pinned, paths, headers)
            # Baselines and profiles in the first round the verdict keeps, not one set aside.
            chosen = later if tally.done else settings
            tally.add(_one_round(task, candidate, chosen, machine, pair))
    finally:
        if pair is not None:
            pair.close()
    combined = tally.result()
    if other is None or not combined.correct:
        return combined
    return _at_other_shapes(combined, other, candidate, later, machine)


def forks(settings: KernelBenchSettings) -> bool:
    """Whether an evaluation's rounds fork their workers from zygotes (``runner.Zygotes``): on
    a CPU (a process that forks must not have touched CUDA), timed (Triton's interpreter is set
    up before torch loads), over several rounds."""
    return (
        settings.rounds > 1
        and settings.device == "cpu"
        and settings.timed
        and not settings.compile_only
    )


@dataclass(frozen=True)
class _Machine:
    """Where an evaluation's rounds run (``torch``: None on a CPU until a round imports it)."""

    sandbox: Sandbox
    cpu: int | None
    paths: list[Path]
    torch: Any
    headers: Path | None = None
    """The precompiled torch headers for the candidate's builds (``headers.include_folder``)."""


def _at_other_shapes(
    feedback: Feedback,
    other: KernelBenchTask,
    candidate: str,
    settings: KernelBenchSettings,
    machine: _Machine,
) -> Feedback:
    """``feedback`` (correct), with a ``shapes`` warning when the candidate is wrong at
    ``other``'s shapes (checked, untimed)."""
    scale = other.scaling.scale
    checks = replace(settings, check_only=True)
    try:
        elsewhere = _one_round(other, candidate, checks, machine)
    except TaskError as error:
        raise TaskError(f"--check-scale {scale:g}: {error}") from None
    if elsewhere.correct:
        return feedback
    sizes = ", ".join(f"{name} {value}" for name, value in other.scaling.changed.items())
    where = f"scale {scale:g}" + (f" ({sizes})" if sizes else "")
    why = elsewhere.error.message if elsewhere.error else "not correct"
    flag = finding("shapes", f"correct at the problem's shapes, wrong at {where}: {why}")
    return feedback.model_copy(update={"flags": [*feedback.flags, flag]})


def _one_round(
    task: KernelBenchTask,
    candidate: str,
    settings: KernelBenchSettings,
    machine: _Machine,
    pair: Zygotes | None = None,
) -> Feedback:
    """One round: fresh seeds, both workers (forked by ``pair``), checks, timing, verdict."""
    clock = PhaseClock()
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    job = Job.write(task, candidate) if pair is None else pair.job.again()
    try:
        sandbox, torch = machine.sandbox, machine.torch
        runner = WorkerRunner(
            sandbox,
            task,
            settings,
            job.folder,
            machine.paths,
            machine.cpu,
            job.seeds.layout,
            machine.headers,
        )
        if settings.compile_only:
            judge = Judge.start(torch, task, settings, digest, sandbox)
            return judge.compile_check(_compile_check(runner, job))
        key = roofline.roofline_key(task, settings)
        compiled = roofline.known(key, "compile") if settings.compile_baseline else None
        window = Round(TimedPlan(), settings.stopping(), opened=False)
        try:
            reference, judged, torch = _run_both(
                window, runner, job, candidate, pair, torch, clock, compiled is None
            )
            clock.after_runs(reference, judged, window.turns)
            check_reference(task, reference, settings.timed)
            assert reference.report is not None
            reference.report.roofline = roofline.remember(key, reference.report.roofline)
            judge = Judge.start(torch, task, settings, digest, sandbox, window)
            feedback = judge.judge(reference, judged)
        finally:
            window.release()
        if settings.compile_baseline:
            feedback = _compile_baseline(feedback, key, compiled)
        clock.mark("judging")
        if feedback.correct and settings.profile and settings.device == "cuda":
            spec, cache = job.spec(task, settings), cache_folder("cand", candidate)
            feedback = ncu.with_kernel_metrics(feedback, runner, spec, candidate, cache)
            clock.mark("kernels")
        return feedback.model_copy(update={"phases": clock.phases})
    finally:
        if pair is None:
            job.remove()


def _compile_check(runner: WorkerRunner, job: Job) -> Ran:
    """``--compile-only``: ``load_inline`` sources compiled against ``cuda_stubs``, nothing run."""
    stubs = importlib.resources.files("maxcode.kinds.kernelbench").joinpath("cuda_stubs")
    shutil.copytree(str(stubs), job.folder / "stubs")
    os.chmod(job.folder / "stubs", 0o755)
    spec = replace(job.spec(runner.task, runner.settings), stubs=str(job.folder / "stubs"))
    return runner.run("compile_check", spec, cache_folder("cc", ""))


def _run_both(
    window: Round,
    runner: WorkerRunner,
    job: Job,
    candidate: str,
    pair: Zygotes | None,
    torch: Any,
    clock: PhaseClock,
    no_compile_kept: bool,
) -> tuple[Ran, Ran, Any]:
    """Both workers at once, their conversations on ``window``; returns both runs and the
    parent's torch. The window opens once the parent's torch is imported (while the workers
    start up); its first chunk waits for the timing CPU's turn (``_timing_turn``). The
    reference's baselines follow the pairs (``torch.compile`` when asked and not kept:
    ``no_compile_kept``)."""
    task, settings = runner.task, runner.settings
    common = job.spec(task, settings)
    measure_compile = settings.compile_baseline and no_compile_kept
    phases = (Phase.PAIRS, Phase.IDENTITY) + ((Phase.COMPILE,) if measure_compile else ())
    known = roofline.known(roofline.roofline_key(task, settings)) is not None
    cache = cache_folder("cand", candidate)
    cpu = runner.cpu if settings.device == "cpu" else None
    sides = {
        Side.REFERENCE: (
            Conversation(window, Side.REFERENCE, job.seeds.check, phases, cpu),
            replace(common, compile_baseline=measure_compile, roofline=not known),
            cache_folder("ref", task.reference),
            2 * task.timeout_s + settings.budget_s,
        ),
        Side.CANDIDATE: (
            Conversation(window, Side.CANDIDATE, job.seeds.check, (Phase.PAIRS,), cpu),
            common,
            cache,
            task.timeout_s + settings.budget_s,
        ),
    }
    clock.mark("start")
    # Held before either worker starts: a build running elsewhere finishes on no one's clock.
    with (
        sole_user(cache),
        device_turn(settings.device),
        _timing_turn(window, runner, pair, cpu) as (runner, home),
        ThreadPoolExecutor(2, thread_name_prefix="maxcode-kb") as pool,
    ):
        if settings.device == "cuda":
            clock.mark("queued")
        running = {}
        for side, (conversation, spec, folder, wall_s) in sides.items():
            conversation.home = home
            if pair is not None:
                forked = pair.side(side).run
                running[side] = pool.submit(forked, spec, conversation, wall_s, job.seeds.layout)
            else:
                running[side] = pool.submit(
                    runner.run,
                    str(side),
                    spec,
                    folder,
                    conversation=conversation,
                    wall_s=wall_s,
                    exclusive=False,
                )
        try:
            if torch is None:  # imported while the workers start up, before any timing
                import torch
            window.compare_with(Comparer(torch, settings.tolerance))
        finally:
            window.turns.open()
        return running[Side.REFERENCE].result(), running[Side.CANDIDATE].result(), torch


@contextlib.contextmanager
def _timing_turn(
    window: Round, runner: WorkerRunner, pair: Zygotes | None, cpu: int | None
) -> Iterator[tuple[WorkerRunner, int | None]]:
    """The round's hold on timing CPU ``cpu`` (``turns.CpuTurn``) for the block, with the runner and
    the one CPU the workers do the task's work on until their timed chunks (listener
    ``home``): taken at once when nobody holds it, that CPU (``runner`` as given); otherwise
    awaited when ``window``'s first timed chunk is due, the workers started on another CPU
    meanwhile (``runner`` with ``elsewhere``), that one. The parent moves each worker to the
    timing CPU alone before its first timed chunk (listener ``_move_to``). A round with no other
    CPU to start on, or whose zygotes live on the timing CPU, waits for the turn here, as every
    round does with ``MAXCODE_TURN=start`` (to measure)."""
    turn = CpuTurn(cpu)
    # Forks start where their zygote lives, which it chose at its start.
    elsewhere = turn.elsewhere if pair is None else pair.reference.runner.elsewhere
    if not turn.now() and (not elsewhere or os.environ.get("MAXCODE_TURN") == "start"):
        turn.take()
    window.turns.before_timing = turn.take
    try:
        if turn.held:
            yield runner, turn.cpu
        else:
            yield replace(runner, elsewhere=elsewhere), min(elsewhere, default=None)
    finally:
        turn.release()


def _compile_baseline(
    feedback: Feedback, key: tuple[str, str, str], compiled: dict[str, Any] | None
) -> Feedback:
    """The torch.compile baseline, the reference's alone: measured in a task's first clean
    round and kept (``roofline.remember``); later rounds scale the kept ratio of compiled to
    eager time by their own speedup."""
    timings = feedback.kernelbench.timings if feedback.kernelbench else {}
    if compiled is None:
        if rounds.clean(feedback) and "compile" in timings and "reference" in timings:
            measured = {
                "compile": timings["compile"].model_dump(),
                "eager_s": timings["reference"].median_s,
            }
            roofline.remember(key, measured, "compile")
        return feedback
    try:
        stats = TimingStats.model_validate(compiled["compile"])
        eager_s = float(compiled["eager_s"])
    except (KeyError, TypeError, ValueError, ValidationError):
        return feedback
    update: dict[str, Any] = {"timings": {**timings, "compile": stats}}
    if rounds.clean(feedback) and eager_s > 0:
        update["speedup_vs_compile"] = stats.median_s / eager_s * feedback.speedup
    return feedback.with_kernelbench(**update)


PHASES = {
    "start": "the job folder, the seeds, the parent's checks, until the workers are launched",
    "queued": "on a GPU: waiting for the candidate's build folder and for the GPU, which "
    "another evaluation on this machine held (runner ``device_turn``)",
    "startup": "until both workers are ready: interpreters, torch, the problem and the "
    "candidate imported (its extensions built or loaded), models built, warm-up",
    "build": "within startup: the candidate's import by its worker's clock (build or cache)",
    "checks": "the check seeds run twice on both sides, until the first timed chunk was due",
    "turn": "on a CPU: waiting for the timing CPU's turn, which another evaluation on this "
    "machine held for its timed window (``turns.CpuTurn``)",
    "timing": "the alternated timed chunks of both sides, until the interval was narrow",
    "calls": "within timing: the timed calls themselves, both sides (their own seconds)",
    "inputs": "within timing: making the timed calls' inputs, both sides (host time)",
    "outputs": "within timing: sending the timed calls' outputs to the parent and freeing "
    "them, both sides (host time); the rest of timing is the parent's turns between chunks",
    "finish": "the reference's baselines (identity model, torch.compile), roofline, outputs "
    "saved, both processes gone",
    "judging": "the comparison and the verdict in the parent",
    "kernels": "the candidate's forward under Nsight Compute (--profile on CUDA)",
}
"""What each of ``Feedback.phases`` covers (seconds, one after another on the parent's clock
but ``build`` and the ``WINDOW`` parts)."""
WINDOW = {"calls": "calls", "inputs": Part.MAKING, "outputs": Part.SENDING}
"""The timing window's parts shown as phases, by their names in ``StampedChunks.spent``."""


class PhaseClock:
    """The parent's clock through one evaluation: seconds per phase (``PHASES``)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter_ns()

    def mark(self, phase: str, at: int | None = None) -> None:
        """``phase`` ended at ``at`` (None: now; a stamp before the last one is skipped)."""
        now = time.perf_counter_ns() if at is None else at
        if now < self._last:
            return
        self.phases[phase] = round((now - self._last) / 1e9, 4)
        self._last = now

    def after_runs(self, reference: Ran, candidate: Ran, turns: Turns) -> None:
        """The phases of the two workers' runs, from the stamps their conversations left."""
        ended = time.perf_counter_ns()
        conversations = [side.conversation for side in (reference, candidate)]
        ready = [c.ready_at for c in conversations if c is not None and c.ready_at is not None]
        if len(ready) == 2:
            self.mark("startup", max(ready))
        if turns.due_ns is not None:
            self.mark("checks", turns.due_ns)
        if turns.started_ns is not None:
            self.mark("turn", turns.started_ns)
        if turns.stopped_ns is not None:
            self.mark("timing", turns.stopped_ns)
        self.mark("finish", ended)
        spent = [c.measured(Phase.PAIRS).spent() for c in conversations if c is not None]
        if len(spent) == 2 and spent[0] is not None and spent[1] is not None:
            for name, part in WINDOW.items():
                self.phases[name] = round(spent[0][part] + spent[1][part], 4)
        report = candidate.report
        if report is not None and "load" in report.stages:
            self.phases["build"] = round(report.stages["load"], 4)
