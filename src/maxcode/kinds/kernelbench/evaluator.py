"""One KernelBench evaluation, start to end: ``evaluate_kernelbench`` and its helpers.

Protocol (one call of ``evaluate_kernelbench``):

1. Fresh secret seeds: one for the weights (both models are built after the same seed) and a
   few for warm-up inputs: the only seeds a worker's spec file holds. The check seeds and the
   timed calls' seeds stay in the parent until a worker has built and warmed up its model.
2. Two sandboxed processes (``worker``) start together, one for the reference, one for the
   candidate (a fresh one per candidate; importing it builds its extensions, cached by source
   hash). Both start up on the timing CPU, since where a process first touches its memory
   stays with it; in an evaluation of one round both load torch unpinned and pin themselves
   before anything of the task loads (runner ``pins_late``). Each runs every check seed twice.
3. Timing in one window (``schedule.py``): once both finished their checks, the parent grants
   chunks of timed calls in turn, reference chunk n then candidate chunk n on the same fresh
   seeds; the side whose turn it is not waits on its descriptor 3. Each chunk's seeds are sent
   just before it, the kept outputs named only after it ran. Timing stops when the speedup's
   95% interval is within +-2% (or at a cap). Then the reference times an identity model (the
   harness's overhead per call) and, when asked, ``torch.compile`` (once per task:
   ``_compile_baseline``).
4. Judgement in the parent (``judge.py``) with the parent's own torch (imported while the
   workers start up).

With ``settings.rounds`` above one, steps 1-4 run again with fresh seeds and fresh workers,
and the rounds are combined (``rounds.py``: a bias that lasts a whole process is sampled
only by fresh processes). On a CPU those workers are forked, each side's from a zygote of its
own that imported torch once for the evaluation (``zygote.py``): both zygotes start as step 2
says the workers do.

The reward is the paired estimate of eager time / candidate time (``stats.chunk_pair_speedup``,
with its interval); ``speedup_vs_compile`` is reported too. ``Feedback.phases`` says where the
seconds went (``PHASES``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import importlib.util
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.errors import MaxcodeError, TaskError
from maxcode.harness.integrity import finding
from maxcode.harness.sandbox import Sandbox, hidden_from_others
from maxcode.harness.turns import cpu_turn, timing_cpu
from maxcode.kinds.kernelbench import roofline, rounds
from maxcode.kinds.kernelbench.backends import check_backend
from maxcode.kinds.kernelbench.channel import Conversation
from maxcode.kinds.kernelbench.judge import Judge
from maxcode.kinds.kernelbench.outputs import Comparison
from maxcode.kinds.kernelbench.problem import KernelBenchTask, rescaled
from maxcode.kinds.kernelbench.runner import (
    Job,
    Ran,
    WorkerRunner,
    cache_folder,
    check_reference,
    device_turn,
    python_paths,
    sole_user,
)
from maxcode.kinds.kernelbench.schedule import Schedule, TimedPlan
from maxcode.kinds.kernelbench.settings import KernelBenchSettings
from maxcode.kinds.kernelbench.worker.protocol import Part, Phase, Side, WorkerSpec
from maxcode.kinds.kernelbench.zygote import ROUNDS_PER_PAIR, Zygotes
from maxcode.types import Feedback, TimingStats


def check_device(
    device: str, compile_only: bool = False, backend: str | None = None, *, lazy: bool = False
) -> Any:
    """PyTorch, once it is known to be installed and to reach ``device`` (else a clear error);
    ``compile_only`` needs a compiler for the device instead of the device; ``backend`` must be
    one this device serves (``backends.check_backend``); ``lazy``: on a CPU, None instead of
    torch, whose import is then the caller's (it can overlap the workers' start-up)."""
    if device not in ("cpu", "cuda"):
        raise MaxcodeError(f"unknown device {device!r} (cpu or cuda)")
    check_backend(backend, device, compile_only)
    if importlib.util.find_spec("torch") is None:
        raise TaskError("KernelBench tasks need PyTorch: pip install 'maxcode[torch]'")
    if lazy and device == "cpu" and not compile_only:
        return None
    import torch

    if compile_only:
        if device == "cuda" and _nvcc() is None:
            raise MaxcodeError("--compile-only --device cuda needs nvcc (the CUDA toolkit)")
    elif device == "cuda" and not torch.cuda.is_available():
        hint = " (--compile-only checks that a CUDA candidate builds)" if _nvcc() else ""
        raise MaxcodeError(
            f"--device cuda: this machine has no CUDA GPU that PyTorch can use{hint}"
        )
    return torch


def resolve_device(device: str) -> str:
    """The device ``device`` names: ``auto`` is ``cuda`` when PyTorch sees a GPU, else
    ``cpu``."""
    if device != "auto":
        return device
    if importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_note(device: str) -> str:
    """What ``--device auto`` chose, in words."""
    why = "PyTorch sees a GPU" if device == "cuda" else "no GPU that PyTorch can use"
    return f"device: {device} (auto: {why})"


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(path) for path in [Path("/usr/local/cuda/bin/nvcc")] if path.is_file()), None
    )


def needs_build(candidate: str) -> bool:
    """Whether importing the candidate compiles extensions (worth a build step of its own)."""
    return "cpp_extension" in candidate or "load_inline" in candidate


def build_kernelbench(
    task: KernelBenchTask,
    candidate: str,
    *,
    settings: KernelBenchSettings | None = None,
    sandbox: Sandbox | None = None,
) -> Feedback | None:
    """Build the candidate's extensions into the cache, with every CPU (no timing happens);
    returns the verdict when the build fails, None when the evaluation may go ahead."""
    settings = settings or KernelBenchSettings()
    torch = check_device(settings.device, settings.compile_only)
    sandbox = sandbox or Sandbox()
    job = Job.write(task, candidate)
    try:
        runner = WorkerRunner(sandbox, task, settings, job.folder, python_paths(), None)
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
    both are pinned to ``cpu`` (None: the last CPU this process may use). ``settings.rounds``
    evaluations run one after the other, combined (``rounds.Tally``); the first that is not
    a clean correct verdict ends them and is the evaluation's, except a void that a round of
    fresh workers must confirm (``rounds.CONFIRMED``), which runs one round more."""
    settings = settings or KernelBenchSettings()
    if settings.rounds < 1:
        raise MaxcodeError(f"rounds must be at least 1 (got {settings.rounds})")
    pinned = timing_cpu() if cpu is None else cpu
    torch = check_device(settings.device, settings.compile_only, settings.backend, lazy=True)
    sandbox = sandbox or Sandbox()
    paths = python_paths()
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
    tally = rounds.Tally(wanted, settings.round_cap if timed else wanted)
    later = replace(settings, compile_baseline=False, profile=False)
    pair = None
    try:
        while tally.more():
            if forks(settings) and (pair is None or pair.rounds >= ROUNDS_PER_PAIR):
                # A fresh pair for each ``ROUNDS_PER_PAIR`` rounds: a pair's draw is shared.
                if pair is not None:
                    pair.close()
                    pair = None
                pair = Zygotes.start(task, candidate, settings, sandbox, pinned, paths)
            # Baselines and profiles in the first round the verdict keeps, not one set aside.
            chosen = later if tally.done else settings
            tally.add(_one_round(task, candidate, chosen, sandbox, pinned, paths, torch, pair))
    finally:
        if pair is not None:
            pair.close()
    combined = tally.result()
    if other is None or not combined.correct:
        return combined
    return _at_other_shapes(combined, other, candidate, later, sandbox, pinned, paths, torch)


def forks(settings: KernelBenchSettings) -> bool:
    """Whether an evaluation's rounds fork their workers from zygotes (``zygote.py``): on a
    CPU, over several timed rounds. Not on a GPU (a process that forks must not have touched
    CUDA), nor untimed (on a CPU that includes Triton's interpreter, set up before torch
    loads)."""
    return (
        settings.rounds > 1
        and settings.device == "cpu"
        and settings.timed
        and not settings.compile_only
    )


def _at_other_shapes(
    feedback: Feedback,
    other: KernelBenchTask,
    candidate: str,
    settings: KernelBenchSettings,
    sandbox: Sandbox,
    cpu: int | None,
    paths: list[Path],
    torch: Any,
) -> Feedback:
    """``feedback`` (a correct verdict), with a ``shapes`` warning when the candidate's outputs
    are wrong at ``other``'s shapes (checked as at its own, nothing timed)."""
    scale = other.scaling.scale
    checks = replace(settings, check_only=True)
    try:
        elsewhere = _one_round(other, candidate, checks, sandbox, cpu, paths, torch)
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
    sandbox: Sandbox,
    cpu: int | None,
    paths: list[Path],
    torch: Any,
    pair: Zygotes | None = None,
) -> Feedback:
    """One round: fresh seeds, both workers (forked by ``pair`` when given), checks, the
    timing window, the verdict."""
    clock = PhaseClock()
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    written = Job.write(task, candidate) if pair is None else pair.job.again()
    job = written.folder
    plan = TimedPlan()
    conversations: list[Conversation] = []
    try:
        common = written.spec(task, settings)
        runner = WorkerRunner(sandbox, task, settings, job, paths, cpu, written.seeds.layout)
        if settings.compile_only:
            judge = Judge.start(torch, task, settings, digest, sandbox, plan)
            stubs = importlib.resources.files("maxcode.kinds.kernelbench").joinpath("cuda_stubs")
            shutil.copytree(str(stubs), job / "stubs")
            os.chmod(job / "stubs", 0o755)
            checked = runner.run(
                "compile_check", replace(common, stubs=str(job / "stubs")), cache_folder("cc", "")
            )
            return judge.compile_check(checked)
        key = roofline.roofline_key(task, settings)
        compiled = roofline.known(key, "compile") if settings.compile_baseline else None
        measure_compile = settings.compile_baseline and compiled is None
        schedule = Schedule(plan, settings.stopping(), opened=False)
        check_seeds = written.seeds.check
        phases = (
            (Phase.PAIRS, Phase.IDENTITY, Phase.COMPILE)
            if measure_compile
            else (Phase.PAIRS, Phase.IDENTITY)
        )
        reference_spec = replace(
            common, compile_baseline=measure_compile, roofline=roofline.known(key) is None
        )
        # Both workers at once; the schedule alternates their timed chunks on the same seeds.
        # Each time limit has room for the other's turns.
        cache = cache_folder("cand", candidate)
        clock.mark("start")
        # The candidate's build folder is held before either worker starts, so a build still
        # running elsewhere finishes on no one's clock.
        conversations += [
            Conversation(schedule, Side.REFERENCE, check_seeds, phases),
            Conversation(schedule, Side.CANDIDATE, check_seeds, (Phase.PAIRS,)),
        ]
        with (
            sole_user(cache),
            device_turn(settings.device),
            contextlib.ExitStack() as turn,
            ThreadPoolExecutor(2, thread_name_prefix="maxcode-kb") as pool,
        ):
            if settings.device == "cuda":
                clock.mark("queued")

            def start(role: str, spec: WorkerSpec, folder: Path, wall_s: float) -> Any:
                conversation = conversations[0 if role == "reference" else 1]
                if pair is not None:
                    forked = pair.side(role).run
                    return pool.submit(forked, spec, conversation, wall_s, written.seeds.layout)
                return pool.submit(
                    runner.run,
                    role,
                    spec,
                    folder,
                    conversation=conversation,
                    wall_s=wall_s,
                    exclusive=False,
                )

            running_reference = start(
                "reference",
                reference_spec,
                cache_folder("ref", task.reference),
                2 * task.timeout_s + settings.budget_s,
            )
            running_candidate = start(
                "candidate", common, cache, task.timeout_s + settings.budget_s
            )
            try:
                if torch is None:  # imported while the workers start up, before any timing
                    import torch
                comparison = Comparison(torch, settings.tolerance)
                schedule.kept.compare_with(comparison)
                schedule.checked.compare_with(comparison)
                # The timing CPU alone for the window, held until both runs end.
                turn.enter_context(cpu_turn(cpu if settings.device == "cpu" else None))
            finally:
                schedule.open()
            reference, judged = running_reference.result(), running_candidate.result()
        clock.after_runs(reference, judged, schedule)
        check_reference(task, reference, settings.timed)
        assert reference.report is not None
        reference.report.roofline = roofline.remember(key, reference.report.roofline)
        judge = Judge.start(torch, task, settings, digest, sandbox, plan)
        feedback = judge.judge(reference, judged)
        if settings.compile_baseline:
            feedback = _compile_baseline(feedback, key, compiled)
        clock.mark("judging")
        if feedback.correct and settings.profile and settings.device == "cuda":
            feedback = roofline.with_kernel_metrics(feedback, runner, common, candidate, cache)
            clock.mark("kernels")
        return feedback.model_copy(update={"phases": clock.phases})
    finally:
        for conversation in conversations:
            conversation.release()
        if pair is None:
            written.remove()


def _compile_baseline(
    feedback: Feedback, key: tuple[str, str, str], compiled: dict[str, Any] | None
) -> Feedback:
    """The torch.compile baseline is the reference's alone: measured in a task's first clean
    round and kept per task (``roofline.remember``), so a search's later candidates do not pay
    seconds a round for it. A later round reports ``speedup_vs_compile`` as the kept ratio of
    compiled to eager time times its own speedup."""
    timings = feedback.timings
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
    return feedback.model_copy(update=update)


PHASES = {
    "start": "the job folder, the seeds, the parent's checks, until the workers are launched",
    "queued": "on a GPU: waiting for the candidate's build folder and for the GPU, which "
    "another evaluation on this machine held (runner ``device_turn``)",
    "startup": "until both workers are ready: interpreters, torch, the problem and the "
    "candidate imported (its extensions built or loaded), models built, warm-up",
    "build": "within startup: the candidate's import by its worker's clock (build or cache)",
    "checks": "the check seeds run twice on both sides, until the first timed chunk",
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
"""What each of ``Feedback.phases`` covers (seconds; ``build`` is part of ``startup``, and
``calls``, ``inputs`` and ``outputs`` part of ``timing`` (``WINDOW``); the others follow one
another on the parent's clock)."""
WINDOW = {"calls": "calls", "inputs": Part.MAKING, "outputs": Part.SENDING}
"""The parts of the timing window shown as phases, by the name of their part in
``Conversation.spent``: where a window's seconds go besides the calls it times."""


class PhaseClock:
    """The parent's clock through one evaluation: seconds per phase (``PHASES``)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter_ns()

    def mark(self, phase: str, at: int | None = None) -> None:
        """``phase`` ended at ``at`` (now when None; a stamp before the last one is skipped)."""
        now = time.perf_counter_ns() if at is None else at
        if now < self._last:
            return
        self.phases[phase] = round((now - self._last) / 1e9, 4)
        self._last = now

    def after_runs(self, reference: Ran, candidate: Ran, schedule: Schedule) -> None:
        """The phases of the two workers' runs, from the stamps their conversations left."""
        ended = time.perf_counter_ns()
        conversations = [side.conversation for side in (reference, candidate)]
        ready = [c.ready_at for c in conversations if c is not None and c.ready_at is not None]
        if len(ready) == 2:
            self.mark("startup", max(ready))
        if schedule.started_ns is not None:
            self.mark("checks", schedule.started_ns)
        if schedule.stopped_ns is not None:
            self.mark("timing", schedule.stopped_ns)
        self.mark("finish", ended)
        spent = [c.spent(Phase.PAIRS) for c in conversations if c is not None]
        if len(spent) == 2 and spent[0] is not None and spent[1] is not None:
            for name, part in WINDOW.items():
                self.phases[name] = round(spent[0][part] + spent[1][part], 4)
        report = candidate.report
        if report is not None and "load" in report.stages:
            self.phases["build"] = round(report.stages["load"], 4)
