"""One KernelBench evaluation, start to end: ``evaluate_kernelbench`` and its helpers.

Protocol (one call of ``evaluate_kernelbench``):

1. Fresh secret seeds: one for the weights (both models are built after the same seed) and a
   few for warm-up inputs: the only seeds a worker's spec file holds. The check seeds and the
   timed calls' seeds stay in the parent until a worker has built and warmed up its model.
2. The reference runs in a sandboxed process of its own (``worker.py``): each check seed twice,
   inputs before and after the call, then timed calls of eager (and optionally
   ``torch.compile``) and of an identity model (the harness's overhead per call). Its plan
   (how many timed calls, which outputs are kept) becomes the candidate's.
3. The candidate runs in another sandboxed process (importing it builds its extensions, cached
   by source hash): each check seed twice, inputs after the call, the same timed calls, each
   chunk's seeds sent just before it and the kept outputs named only after it ran.
4. Judgement in the parent (``judge.py``) with the parent's own torch.

The reward is eager time / candidate time (medians); ``speedup_vs_compile`` is reported too.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError, TaskError
from maxcode.evaluate.cpp import timing_cpu
from maxcode.evaluate.kernelbench import roofline
from maxcode.evaluate.kernelbench.backends import check_backend
from maxcode.evaluate.kernelbench.channel import Conversation, TimedPlan
from maxcode.evaluate.kernelbench.judge import Judge
from maxcode.evaluate.kernelbench.runner import (
    Job,
    WorkerRunner,
    cache_folder,
    check_reference,
    python_paths,
)
from maxcode.evaluate.kernelbench.settings import KernelBenchSettings
from maxcode.evaluate.sandbox import Sandbox, hidden_from_others
from maxcode.tasks.model import Task
from maxcode.types import Feedback


def check_device(device: str, compile_only: bool = False, backend: str | None = None) -> Any:
    """PyTorch, once it is known to be installed and to reach ``device`` (else a clear error);
    ``compile_only`` needs a compiler for the device instead of the device; ``backend`` must be
    one this device serves (``backends.check_backend``)."""
    if device not in ("cpu", "cuda"):
        raise MaxcodeError(f"unknown device {device!r} (cpu or cuda)")
    check_backend(backend, device, compile_only)
    if importlib.util.find_spec("torch") is None:
        raise TaskError("KernelBench tasks need PyTorch: pip install 'maxcode[torch]'")
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


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(path) for path in [Path("/usr/local/cuda/bin/nvcc")] if path.is_file()), None
    )


def needs_build(candidate: str) -> bool:
    """Whether importing the candidate compiles extensions (worth a build step of its own)."""
    return "cpp_extension" in candidate or "load_inline" in candidate


def build_kernelbench(
    task: Task,
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
    task: Task,
    candidate: str,
    *,
    settings: KernelBenchSettings | None = None,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
) -> Feedback:
    """Judge ``candidate`` (Python source defining ``ModelNew``) against the task's ``Model``;
    both are pinned to ``cpu`` (None: the last CPU this process may use)."""
    settings = settings or KernelBenchSettings()
    if cpu is None:
        cpu = timing_cpu()
    torch = check_device(settings.device, settings.compile_only, settings.backend)
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
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    written = Job.write(task, candidate)
    job = written.folder
    plan = TimedPlan()
    try:
        common = written.spec(task, settings)
        runner = WorkerRunner(sandbox, task, settings, job, paths, cpu)
        judge = Judge.start(torch, task, settings, digest, sandbox, plan)
        if settings.compile_only:
            stubs = importlib.resources.files("maxcode.evaluate").joinpath("cuda_stubs")
            shutil.copytree(str(stubs), job / "stubs")
            os.chmod(job / "stubs", 0o755)
            checked = runner.run(
                "compile_check", {**common, "stubs": str(job / "stubs")}, cache_folder("cc", "")
            )
            return judge.compile_check(checked)
        key = roofline.roofline_key(task, settings)
        check_seeds = written.seeds.check
        phases = ("K", "O", "C") if settings.compile_baseline else ("K", "O")
        reference = runner.run(
            "reference",
            {
                **common,
                "compile_baseline": settings.compile_baseline,
                "roofline": roofline.known(key) is None,
            },
            cache_folder("ref", task.reference),
            conversation=Conversation(plan, check_seeds, phases, decides=True),
        )
        check_reference(task, reference, settings.timed)
        assert reference.report is not None
        reference.report.roofline = roofline.remember(key, reference.report.roofline)
        # The candidate makes exactly the reference's timed calls, on the same seeds, so every
        # output kept has the reference's output to be checked against.
        cache = cache_folder("cand", candidate)
        judged = runner.run(
            "candidate",
            common,
            cache,
            conversation=Conversation(plan, check_seeds, ("K",), decides=False),
        )
        feedback = judge.judge(reference, judged)
        if feedback.correct and settings.profile and settings.device == "cuda":
            feedback = roofline.with_kernel_metrics(feedback, runner, common, candidate, cache)
        return feedback
    finally:
        written.remove()
