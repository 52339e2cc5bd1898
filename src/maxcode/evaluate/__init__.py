"""Evaluation: build, check and time a candidate against its task, in a sandbox."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

from maxcode.errors import MaxcodeError
from maxcode.evaluate.build import CompileResult, build_cpp
from maxcode.evaluate.compare import Comparison, compare_output
from maxcode.evaluate.cpp import evaluate_cpp
from maxcode.evaluate.kernelbench import (
    KernelBenchSettings,
    build_kernelbench,
    evaluate_kernelbench,
    needs_build,
)
from maxcode.evaluate.kernelbench.rounds import reported_rounds
from maxcode.evaluate.sandbox import (
    ISOLATION_CHOICES,
    Limits,
    Sandbox,
    SandboxResult,
    detect_isolation,
)
from maxcode.evaluate.turns import timing_budget_s
from maxcode.tasks import Task, load_task
from maxcode.types import Feedback, Metric

__all__ = [
    "Comparison",
    "CompileResult",
    "KernelBenchSettings",
    "Limits",
    "Sandbox",
    "SandboxResult",
    "build_cpp",
    "check_timing_settings",
    "compare_output",
    "detect_isolation",
    "evaluate",
    "evaluate_cpp",
    "evaluate_kernelbench",
    "evaluate_task",
    "prebuild_task",
]


def evaluate_task(
    task: Task,
    candidate_source: str,
    *,
    metric: Metric = "wall",
    device: str = "cpu",
    repeats: int | None = None,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
    compile_baseline: bool = False,
    tolerance: float | None = None,
    compile_only: bool = False,
    profile: bool = False,
    backend: str | None = None,
    rounds: int | None = None,
    check_scale: float | None = None,
    reported: bool = False,
) -> Feedback:
    """Judge a candidate's source against a loaded task (``cpu``: where timed runs are pinned;
    None picks one). KernelBench only: ``compile_baseline`` also times ``torch.compile`` of the
    reference; ``tolerance`` replaces the per-dtype defaults; ``compile_only`` builds the
    candidate's extensions and runs nothing; ``profile`` adds where each forward's time goes;
    ``backend`` is the candidates' kernel language (None: ``cuda`` on a GPU, C++ on a CPU);
    ``rounds`` timing windows with fresh workers are combined (None: one, a screen, or
    ``REPORTED_ROUNDS`` when ``reported``). C++ and project
    tasks start fresh processes every timed round already and take no ``rounds``.
    ``check_scale``: a correct KernelBench candidate is also checked at the problem's sizes
    times this (untimed; wrong there is a ``shapes`` warning). ``reported``: the speedup is
    reported (``maxcode eval``, re-verification), not a screen of a search's candidate: timed
    to a narrower interval (C++: within larger caps, ``turns.REPORTED``; KernelBench: in
    ``rounds`` rounds when given, else ``REPORTED_ROUNDS``, and with ``repeats`` unset more
    while they scatter, up to ``MOST_ROUNDS``; ``MAXCODE_MOST_ROUNDS`` caps both,
    ``rounds.reported_rounds``); project tasks time their fixed ``repeats`` either way."""
    if check_scale is not None and task.kind != "kernelbench":
        raise MaxcodeError(f"{task.name}: --check-scale is for KernelBench tasks")
    if device == "auto":
        from maxcode.evaluate.kernelbench import resolve_device

        device = resolve_device(device, task.kind)
    if task.kind == "cpp":
        if device != "cpu":
            raise MaxcodeError(
                f"{task.name}: C++ tasks run on the CPU; --device {device} is for KernelBench"
            )
        if backend is not None:
            raise MaxcodeError(f"{task.name}: --backend is for KernelBench tasks")
        return evaluate_cpp(
            task,
            candidate_source,
            metric=metric,
            repeats=repeats,
            sandbox=sandbox,
            cpu=cpu,
            profile=profile,
            reported=reported,
        )
    if task.kind == "project":
        if device != "cpu":
            raise MaxcodeError(f"{task.name}: project tasks run on the CPU")
        from maxcode.evaluate.project import evaluate_project

        return evaluate_project(
            task,
            candidate_source,
            metric=metric,
            repeats=repeats,
            sandbox=sandbox,
            cpu=cpu,
            profile=profile,
        )
    if task.kind == "kernelbench":
        if metric != "wall":
            raise MaxcodeError(f"{task.name}: KernelBench tasks are timed (--metric wall)")
        # A screen runs one round; a reported number's go on while they scatter (adaptive).
        least, most = (
            reported_rounds(adaptive=repeats is None) if reported and rounds is None else (1, None)
        )
        settings = KernelBenchSettings(
            device=device,
            trials=repeats,
            compile_baseline=compile_baseline,
            tolerance=tolerance,
            compile_only=compile_only,
            profile=profile,
            backend=backend,
            rounds=rounds or least,
            most_rounds=most,
            check_scale=check_scale,
        )
        return evaluate_kernelbench(
            task, candidate_source, settings=settings, sandbox=sandbox, cpu=cpu
        )
    raise MaxcodeError(f"{task.name}: unknown task kind {task.kind}")


def check_timing_settings() -> None:
    """Raise ``TaskError`` for a malformed ``MAXCODE_TIMING_BUDGET_S`` or
    ``MAXCODE_MOST_ROUNDS``, which each evaluation reads when it times."""
    timing_budget_s()
    reported_rounds(adaptive=True)


def prebuild_task(
    task: Task, candidate_source: str, *, device: str = "cpu", sandbox: Sandbox | None = None
) -> Feedback | None:
    """Build what a candidate compiles, apart from its evaluation (no timing, every CPU), so
    that builds can overlap other evaluations' timing on a GPU. Returns the verdict when the
    build fails; None when there was nothing to build or the build is cached for the
    evaluation."""
    if task.kind != "kernelbench" or not needs_build(candidate_source):
        return None
    settings = KernelBenchSettings(device=device)
    return build_kernelbench(task, candidate_source, settings=settings, sandbox=sandbox)


def evaluate(
    task_spec: str,
    candidate_path: str | Path,
    *,
    metric: str = "wall",
    device: str = "auto",
    repeats: int | None = None,
    pie_tests: str | Path | None = None,
    isolation: str = "auto",
    unsafe_isolation: bool = False,
    scale: float = 1.0,
    compile_baseline: bool = False,
    tolerance: float | None = None,
    compile_only: bool = False,
    profile: bool = False,
    backend: str | None = None,
    rounds: int | None = None,
    check_scale: float | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> Feedback:
    """``maxcode eval``: load the task and the candidate file, then judge the candidate.
    ``device`` ``auto``: a GPU for a KernelBench task when PyTorch sees one, else the CPU
    (``say`` is told which once the candidate is judged).

    ``isolation`` outside ``SAFE_LEVELS`` (what ``auto`` falls back to without bubblewrap and
    namespaces) is refused with ``UnsafeIsolation`` unless ``unsafe_isolation`` accepts it.
    The number is reported: timed as such (``evaluate_task``'s ``reported``; KernelBench:
    exactly ``rounds`` when given)."""
    if metric not in ("wall", "instructions", "printed"):
        raise MaxcodeError(f"unknown metric {metric!r} (wall, instructions or printed)")
    if isolation not in ISOLATION_CHOICES:
        raise MaxcodeError(f"unknown isolation {isolation!r}")
    # The sandbox first: a refused level is the user's to fix before anything is loaded.
    sandbox = Sandbox(isolation, unsafe_ok=unsafe_isolation)
    task = load_task(task_spec, pie_tests, scale)
    chose = device == "auto" and task.kind == "kernelbench"
    if device == "auto":
        from maxcode.evaluate.kernelbench import resolve_device

        device = resolve_device(device, task.kind)
    if task.kind != "kernelbench" and rounds is not None:
        raise MaxcodeError(
            f"{task.name}: --rounds is for KernelBench tasks (C++ and project tasks time "
            "fresh processes every round; --repeats sets the least number of rounds)"
        )
    path = Path(candidate_path)
    if task.kind == "project":
        from maxcode.evaluate.project import load_candidate

        source = load_candidate(task, path)
    else:
        if metric == "printed":
            raise MaxcodeError("--metric printed is for project tasks (a cost the bench prints)")
        try:
            source = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise MaxcodeError(f"candidate not found: {path}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise MaxcodeError(f"candidate {path} cannot be read: {error}") from None
    if device == "cuda" and not compile_only:
        # Built first, on every CPU and without the GPU's turn: an evaluation holds the GPU
        # from its workers' start, and a build of torch's headers takes a minute.
        failed = prebuild_task(task, source, device=device, sandbox=sandbox)
        if failed is not None:
            return failed
    feedback = evaluate_task(
        task,
        source,
        metric=cast(Metric, metric),
        device=device,
        repeats=repeats,
        sandbox=sandbox,
        compile_baseline=compile_baseline,
        tolerance=tolerance,
        compile_only=compile_only,
        profile=profile,
        backend=backend,
        rounds=rounds,
        check_scale=check_scale,
        reported=True,
    )
    if chose:
        from maxcode.evaluate.kernelbench import device_note

        say(device_note(device))
    return feedback
