"""The KernelBench evaluator: a PyTorch reference ``Model`` against a candidate ``ModelNew``.

Protocol (one call of ``evaluate_kernelbench``):

1. Fresh secret seeds: one for the weights (both models are built after the same seed), a few
   for correctness checks, a few for the input sets rotated through the timed calls.
2. The reference runs in a sandboxed process of its own (``kernelbench_worker.py``): each check
   seed twice, inputs before and after the call, then timed calls of eager (and optionally
   ``torch.compile``) and of an identity model (the harness's overhead per call).
3. The candidate runs in another sandboxed process (importing it builds its extensions, cached
   by source hash): each check seed twice, inputs after the call, timed calls over the same
   input sets.
4. Judgement here, in the parent, with the parent's own torch: outputs (type, dtype, shape,
   values within the dtype's tolerance) of both runs of every seed and of the last timed call
   on every input set; inputs unchanged; no output sharing an input's memory; host time
   stamps (taken here when the worker writes a marker) against the in-process timings.
5. The task itself is screened on every evaluation: an all-zeros or a constant output that
   passes the tolerance, an output that ignores its inputs, or a reference that disagrees
   with itself goes into ``flags``.

The reward is eager time / candidate time (medians); ``speedup_vs_compile`` is reported too.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.resources
import importlib.util
import json
import os
import re
import secrets
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.config import cache_dir
from maxcode.errors import MaxcodeError, TaskError
from maxcode.evaluate import ncu
from maxcode.evaluate.build import bounded_diagnostics
from maxcode.evaluate.cpp import timing_cpu
from maxcode.evaluate.kernelbench.worker import NVTX_RANGE
from maxcode.evaluate.sandbox import (
    Limits,
    Run,
    Sandbox,
    SandboxResult,
    hidden_from_others,
    make_scratch,
)
from maxcode.tasks.model import Task
from maxcode.types import (
    ErrorInfo,
    ErrorKind,
    Feedback,
    ForwardProfile,
    Roofline,
    TestOutcome,
    TimingStats,
)

IMPLAUSIBLE_SPEEDUP = 100.0
DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per output dtype; other floating types get 1e-2; integers and bools are exact."""
CHECK_SEEDS = 3
WARMUP_SEEDS = 3
CHUNK = 8
"""Timed calls between two host time stamps (their inputs are made before the first)."""
KEEP_BYTES = 256 << 20
"""Outputs of timed calls kept for checking, per program: all of them when they fit."""
SAMPLED_OUTPUTS = 16
"""Timed calls checked when not all outputs fit (a random sample, drawn after warm-up)."""
_HOST_SHARE = 0.5
_HOST_SLACK_S = 0.002
_RESULT_BYTES = 4 << 30
_COLLECTED_CHARS = 1 << 20
ROOFLINE_SLACK = 1.5
"""On CUDA, a candidate claiming to beat the memory floor (its inputs, weights and outputs
moved once at the measured rate) by more than this factor is flagged and its reward capped
there. The timed calls flush the L2 cache first, so those bytes must come from device memory;
1.5 leaves room for a kernel that streams better than the measured copy and sum."""


@dataclass(frozen=True)
class KernelBenchSettings:
    """How one KernelBench evaluation checks and times (defaults by device)."""

    device: str = "cpu"
    """cpu or cuda."""
    trials: int | None = None
    """Timed calls per program; None: as many as fit ``budget_s`` within the device's bounds."""
    compile_baseline: bool = False
    """Also time the reference under ``torch.compile``."""
    tolerance: float | None = None
    """atol = rtol for floating outputs; None: by dtype (``DEFAULT_TOLERANCE``)."""
    budget_s: float = 1.0
    """Seconds of timed calls aimed at per program, when ``trials`` is None."""
    profile: bool = False
    """Profile one forward of the reference and of the candidate (``torch.profiler``)."""
    compile_only: bool = False
    """Only compile the candidate's extensions (nvcc for CUDA sources): no GPU needed, nothing
    run, no reward."""

    def worker_timing(self) -> dict[str, Any]:
        """The worker's timing settings: CUDA takes at least 100 trials, as KernelBench does."""
        cuda = self.device == "cuda"
        low, high = (100, 2000) if cuda else (10, 200)
        if self.trials is not None:
            low = high = self.trials
        return {
            "warmup": 10 if cuda else 3,
            "min_trials": low,
            "max_trials": high,
            "budget_s": self.budget_s,
            "keep_bytes": KEEP_BYTES,
            "chunk": CHUNK,
            "sample_outputs": SAMPLED_OUTPUTS,
        }


@dataclass
class _Markers:
    """Host time stamps of the marker lines a worker writes on descriptor 3."""

    read_fd: int
    write_fd: int
    stamps: dict[str, int] = field(default_factory=dict)
    thread: threading.Thread | None = None

    @classmethod
    def open(cls) -> _Markers:
        read_fd, write_fd = os.pipe()
        markers = cls(read_fd, write_fd)
        markers.thread = threading.Thread(target=markers._read, daemon=True)
        markers.thread.start()
        return markers

    def _read(self) -> None:
        pending = b""
        with os.fdopen(self.read_fd, "rb", buffering=0) as stream:
            while chunk := stream.read(4096):
                now = time.perf_counter_ns()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    label = line.decode(errors="replace").strip()[:12]
                    # Per chunk, the first begin and the last end: a forged marker can only
                    # lengthen a chunk.
                    if label[1:2] == "b":
                        self.stamps.setdefault(label, now)
                    elif label[1:2] == "e":
                        self.stamps[label] = now

    def close(self) -> dict[str, int]:
        os.close(self.write_fd)
        if self.thread is not None:
            self.thread.join(timeout=5)
        return self.stamps

    def per_call(self, prefix: str, trials: int) -> float | None:
        """Host seconds per call: the median over the chunks of ``trials`` calls (None when a
        chunk's stamps are missing). A time-keeping cheat shows in every chunk; the median
        keeps one chunk that the scheduler held up (the process, or the parent's reader of the
        stamps) from looking like one."""
        if trials <= 0:
            return None
        rates = []
        for chunk in range((trials + CHUNK - 1) // CHUNK):
            begin = self.stamps.get(f"{prefix}b{chunk}")
            end = self.stamps.get(f"{prefix}e{chunk}")
            if begin is None or end is None or end < begin:
                return None
            calls = min(CHUNK, trials - chunk * CHUNK)
            rates.append((end - begin) / 1e9 / calls)
        return statistics.median(rates)


@dataclass
class _Side:
    """What one worker run left: its report, its tensors, its sandbox result, its markers."""

    report: dict[str, Any]
    tensors: dict[str, Any] | None
    sandbox: SandboxResult
    markers: _Markers
    collected: str = ""
    """The text of a file the run was asked to leave (ncu's log), bounded."""


@functools.cache
def _python_paths() -> list[Path]:
    """What the worker's interpreter needs to see: its installation and torch's packages."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for module in ("torch", "ninja"):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            paths.add(Path(spec.origin).resolve().parent.parent)
    kept: list[Path] = []
    for path in sorted(paths, key=lambda item: len(item.parts)):
        if not any(path.is_relative_to(parent) for parent in kept):
            kept.append(path)
    return kept


def check_device(device: str, compile_only: bool = False) -> Any:
    """PyTorch, once it is known to be installed and to reach ``device`` (else a clear error);
    ``compile_only`` needs a compiler for the device instead of the device."""
    if device not in ("cpu", "cuda"):
        raise MaxcodeError(f"unknown device {device!r} (cpu or cuda)")
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
    job = _Job.write(task, candidate)
    try:
        runner = _WorkerRunner(sandbox, task, settings, job.folder, _python_paths(), None)
        built = runner.run("build", job.spec(task, settings), _cache_folder("cand", candidate))
    finally:
        job.remove()
    if built.report.get("stage") == "ok":
        return None
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    verdict = _Judge(torch, task, settings, digest, _isolation_flags(sandbox), sandbox.isolation)
    return verdict._run_failure(built) or verdict.failed("runtime_error", "the build failed")


@dataclass(frozen=True)
class _Job:
    """The read-only folder a worker reads: the problem, the candidate, the worker itself."""

    folder: Path
    seeds: _Seeds

    @classmethod
    def write(cls, task: Task, candidate: str) -> _Job:
        folder = make_scratch("maxcode-kb-job-")
        os.chmod(folder, 0o755)
        _write(folder / "problem.py", task.reference)
        _write(folder / "candidate.py", candidate)
        worker = importlib.resources.files("maxcode.evaluate.kernelbench").joinpath("worker.py")
        _write(folder / "worker.py", worker.read_text(encoding="utf-8"))
        return cls(folder, _Seeds.fresh())

    def spec(self, task: Task, settings: KernelBenchSettings) -> dict[str, Any]:
        return {
            "problem": str(self.folder / "problem.py"),
            "candidate": str(self.folder / "candidate.py"),
            "overrides": dict(task.extra.get("overrides") or {}),  # type: ignore[call-overload]
            "device": settings.device,
            **self.seeds.as_spec(),
            **settings.worker_timing(),
            "profile": settings.profile,
        }

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


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
    torch = check_device(settings.device, settings.compile_only)
    sandbox = sandbox or Sandbox()
    python_paths = _python_paths()
    if (
        sandbox.drops_uid
        and sandbox.isolation != "bwrap"
        and any(hidden_from_others(path) for path in python_paths)
    ):
        raise TaskError(
            "KernelBench evaluation needs bubblewrap here: the Python installation lives in a "
            "folder other users cannot enter (apt-get install bubblewrap)"
        )
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    flags = _isolation_flags(sandbox)
    written = _Job.write(task, candidate)
    job = written.folder
    try:
        common = written.spec(task, settings)
        runner = _WorkerRunner(sandbox, task, settings, job, python_paths, cpu)
        verdict = _Judge(torch, task, settings, digest, flags, sandbox.isolation)
        if settings.compile_only:
            stubs = importlib.resources.files("maxcode.evaluate").joinpath("cuda_stubs")
            shutil.copytree(str(stubs), job / "stubs")
            os.chmod(job / "stubs", 0o755)
            checked = runner.run(
                "compile_check", {**common, "stubs": str(job / "stubs")}, _cache_folder("cc", "")
            )
            return verdict.compile_check(checked)
        known = _roofline_key(task, settings)
        reference = runner.run(
            "reference",
            {
                **common,
                "compile_baseline": settings.compile_baseline,
                "roofline": known not in _ROOFLINES,
            },
            _cache_folder("ref", task.reference),
        )
        _check_reference(task, reference)
        if isinstance(reference.report.get("roofline"), dict):
            _ROOFLINES.setdefault(known, reference.report["roofline"])
        reference.report["roofline"] = _ROOFLINES.get(known)
        # The candidate makes exactly the reference's timed calls, so every output it keeps
        # has the reference's output to be checked against.
        trials = len(reference.report["times"]["eager"])
        positions = reference.report.get("kept_positions") or []
        matching = {
            "trials": trials,
            "keep_positions": None if len(positions) == trials else positions,
        }
        cache = _cache_folder("cand", candidate)
        judged = runner.run("candidate", {**common, **matching}, cache)
        feedback = verdict.judge(reference, judged)
        if feedback.correct and settings.profile and settings.device == "cuda":
            feedback = _with_kernel_metrics(feedback, runner, common, candidate, cache)
        return feedback
    finally:
        written.remove()


@dataclass(frozen=True)
class _Seeds:
    """Secret seeds of one evaluation: weights, checks, warm-up inputs, and the first of the
    consecutive seeds that give every timed call inputs of its own."""

    init: int
    check: list[int]
    warmup: list[int]
    timing: int

    @classmethod
    def fresh(cls) -> _Seeds:
        draw = secrets.SystemRandom()
        return cls(
            init=draw.randrange(2**31),
            check=[draw.randrange(2**31) for _ in range(CHECK_SEEDS)],
            warmup=[draw.randrange(2**31) for _ in range(WARMUP_SEEDS)],
            timing=draw.randrange(2**40),
        )

    def as_spec(self) -> dict[str, Any]:
        return {
            "init_seed": self.init,
            "check_seeds": self.check,
            "pool_seeds": self.warmup,
            "timing_seed": self.timing,
        }


_ROOFLINES: dict[tuple[str, str, str], dict[str, Any]] = {}
"""The reference's measured work and this device's rates, per reference, shapes and device:
the same for every candidate of a task, so a process measures them once."""


def _roofline_key(task: Task, settings: KernelBenchSettings) -> tuple[str, str, str]:
    shapes = json.dumps(task.extra.get("overrides") or {}, sort_keys=True)
    return hashlib.sha256(task.reference.encode()).hexdigest(), shapes, settings.device


def _with_kernel_metrics(
    feedback: Feedback, runner: _WorkerRunner, common: dict[str, Any], source: str, cache: Path
) -> Feedback:
    """The candidate's forward under Nsight Compute (a sandboxed run of its own, after the
    timed ones): its kernels with occupancy and throughput. Without ncu, or when ncu measures
    nothing, a note says why and the torch.profiler kernel times stand."""
    executable = ncu.find_ncu()
    if executable is None:
        note = "no ncu (Nsight Compute) here: kernel times come from torch.profiler only"
        return feedback.model_copy(update={"kernel_metrics_note": note})
    started = time.perf_counter()
    side = runner.run(
        "kernels",
        common,
        cache,
        prefix=tuple(ncu.command(executable, Path("ncu.csv"), NVTX_RANGE)),
        readonly=tuple(ncu.install_folders(executable)),
        collect="ncu.csv",
    )
    spent = time.perf_counter() - started
    kernels = ncu.parse_csv(side.collected, source)
    note = ""
    if not kernels:
        why = ncu.failure_note(side.collected + "\n" + side.sandbox.stderr)
        if not why and side.report.get("stage") not in (None, "ok"):
            why = f"the profiled run failed: {side.report.get('message', '')}"[:200]
        note = why or f"ncu measured no kernels (exit {side.sandbox.exit_code})"
    return feedback.model_copy(
        update={
            "kernel_metrics": kernels,
            "kernel_metrics_note": note,
            "profile_seconds": (feedback.profile_seconds or 0.0) + spent,
        }
    )


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o644)


def _cache_folder(kind: str, source: str) -> Path:
    """A build folder per source (extensions, inductor's cache); only runs of that source
    see it, so one candidate cannot plant a build another will load."""
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    folder = cache_dir("kernelbench") / f"{kind}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    # Each sandboxed run has a uid of its own; all runs of this source share the folder.
    os.chmod(folder, 0o777)
    return folder


@dataclass
class _WorkerRunner:
    sandbox: Sandbox
    task: Task
    settings: KernelBenchSettings
    job: Path
    python_paths: list[Path]
    cpu: int | None

    def run(
        self,
        role: str,
        spec: dict[str, Any],
        cache: Path,
        *,
        prefix: tuple[str, ...] = (),
        readonly: tuple[Path, ...] = (),
        collect: str | None = None,
    ) -> _Side:
        """One sandboxed worker run; ``prefix`` goes before the interpreter (a profiler),
        ``readonly`` adds folders it must see, ``collect`` names a file it leaves behind."""
        spec_path = self.job / f"{role}.json"
        _write(spec_path, json.dumps({**spec, "role": role}))
        workdir = make_scratch(f"maxcode-kb-{role}-")
        markers = _Markers.open()
        try:
            cuda = self.settings.device == "cuda"
            limits = Limits(
                wall_s=self.task.timeout_s,
                memory_bytes=None if cuda else self.task.memory_mb << 20,
                file_size_bytes=_RESULT_BYTES,
                processes=256,
            )
            environment = {
                "PATH": f"{Path(sys.executable).parent}:/usr/local/cuda/bin:/usr/local/bin:"
                "/usr/bin:/bin",
                "TORCH_EXTENSIONS_DIR": str(cache / "extensions"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                "TRITON_CACHE_DIR": str(cache / "triton"),
                # The run's uid has no passwd entry: getpass and Path.home would fail on it
                # (torch.compile asks for the user's name when it is imported).
                "USER": "maxcode",
                "LOGNAME": "maxcode",
                "HOME": str(workdir),
                "TMPDIR": str(workdir),
                "CXX": "g++",
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
                # glibc would hand large freed blocks back to the system and fault them in
                # again on the next call: every timed call would pay for page faults in
                # proportion to its temporaries, and eager PyTorch makes many. Keep them.
                "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                "MAX_JOBS": "2",
            }
            for passed in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST"):
                if passed in os.environ:
                    environment[passed] = os.environ[passed]
            argv = [
                *prefix,
                sys.executable,
                "-I",
                "-B",
                str(self.job / "worker.py"),
                str(spec_path),
            ]
            with _sole_user(cache):
                results = self.sandbox.run_batch(
                    argv,
                    [Run(workdir=workdir, aux_fd=markers.write_fd)],
                    readonly=[self.job, *self.python_paths, *readonly],
                    writable=[cache],
                    limits=limits,
                    cpu=self.cpu,
                    env=environment,
                    devices=_gpu_devices() if cuda else (),
                )
            markers.close()
            report, tensors = _read_evidence(workdir)
            collected = ""
            if collect is not None and (workdir / collect).is_file():
                with open(workdir / collect, encoding="utf-8", errors="replace") as handle:
                    collected = handle.read(_COLLECTED_CHARS)
            return _Side(report, tensors, results[0], markers, collected)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def _sole_user(cache: Path) -> Iterator[None]:
    """Hold a build folder alone for one worker run. torch's extension builds take a ``lock``
    file that a killed build leaves behind, and every later build of that source would wait for
    it forever; while we hold the folder, any such file is stale and can go."""
    with open(cache.with_name(cache.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            for stale in cache.glob("extensions/*/lock"):
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gpu_devices() -> list[str]:
    found = [str(path) for path in Path("/dev").glob("nvidia*")]
    return [*found, "/dev/dri"] if found else []


def _read_evidence(workdir: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    report_path = workdir / "result.json"
    if not report_path.is_file():
        return {}, None
    try:
        report = json.loads(report_path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
        return {"stage": "runtime_error", "message": "the harness report is not valid JSON"}, None
    if not isinstance(report, dict):
        return {"stage": "runtime_error", "message": "the harness report is malformed"}, None
    tensors_path = workdir / "tensors.pt"
    if report.get("stage") != "ok" or not tensors_path.is_file():
        return report, None
    import torch

    try:
        # weights_only: plain tensors and containers only, whatever the file claims to hold.
        tensors = torch.load(tensors_path, map_location="cpu", weights_only=True)
    except Exception as error:
        return {"stage": "runtime_error", "message": f"unreadable outputs: {error}"}, None
    return report, tensors if isinstance(tensors, dict) else None


def _check_reference(task: Task, side: _Side) -> None:
    report = side.report
    if report.get("stage") == "ok" and side.tensors is not None:
        return
    result = side.sandbox
    if report:
        why = str(report.get("message", "failed")).splitlines()[0]
        where = _failing_frame(str(report.get("detail", "")))
        if where:
            why = f"{why} ({where})"
    elif result.limit_hit and result.wall_s > 0:
        why = f"{result.limit_hit} limit hit"
    else:
        why = _last_line(result.stderr) or f"exit code {result.exit_code}"
    raise TaskError(f"{task.origin}: the reference does not run: {why}")


def _roofline(measured: object, candidate_s: float) -> Roofline | None:
    """The speed of light from the reference's measured work and rates (None when the
    reference did not report them, or reported nonsense)."""
    if not isinstance(measured, dict):
        return None
    try:
        flops, moved = int(measured["flops"]), int(measured["bytes"])
        flop_rate, byte_rate = float(measured["flop_rate"]), float(measured["byte_rate"])
    except (KeyError, TypeError, ValueError):
        return None
    if byte_rate <= 0 or moved < 0 or flops < 0 or flop_rate < 0:
        return None
    memory_floor = moved / byte_rate
    floor = max(memory_floor, flops / flop_rate if flop_rate > 0 else 0.0)
    return Roofline(
        flops=flops,
        bytes=moved,
        flop_rate=flop_rate,
        byte_rate=byte_rate,
        floor_s=floor,
        memory_floor_s=memory_floor,
        fraction=floor / candidate_s if candidate_s > 0 else None,
    )


def _failing_frame(detail: str) -> str:
    """``file:line`` of the innermost frame of a worker's traceback ('' when there is none):
    a reference that fails inside a library needs the place named, not just the error."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', detail)
    if not frames:
        return ""
    path, line = frames[-1]
    return f"at {Path(path).name}:{line}" if "maxcode-kb-job" in path else f"at {path}:{line}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def _isolation_flags(sandbox: Sandbox) -> list[str]:
    if sandbox.isolation == "bwrap":
        return []
    return [f"isolation: {sandbox.isolation} only (install bubblewrap)"]


def _stats(samples: list[float], host: float | None) -> TimingStats:
    ordered = sorted(samples)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [0.0, 0.0, 0.0]
    return TimingStats(
        median_s=statistics.median(ordered),
        spread_s=quartiles[2] - quartiles[0],
        trials=len(ordered),
        host_s=host,
    )


@dataclass
class _Judge:
    torch: Any
    task: Task
    settings: KernelBenchSettings
    digest: str
    flags: list[str]
    isolation: str

    def make(self, **fields: Any) -> Feedback:
        scale = self.task.extra.get("scale")
        return Feedback(
            task=self.task.name,
            metric="wall",
            tests_total=CHECK_SEEDS,
            isolation=self.isolation,
            candidate_sha256=self.digest,
            flags=list(dict.fromkeys(self.flags)),
            device=self.settings.device,
            shape_scale=float(scale) if isinstance(scale, (int, float)) else None,
            **fields,
        )

    def failed(self, kind: ErrorKind, message: str, **fields: Any) -> Feedback:
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

    def compile_check(self, side: _Side) -> Feedback:
        """The verdict of ``--compile-only``: built or not, nothing run, no reward."""
        early = self._run_failure(side)
        if early is not None and not early.compiled:
            return early
        if side.report.get("stage") != "ok":
            message = early.error.message if early and early.error else "the check failed"
            return self.failed("compile_error", message, compiled=False)
        names = ", ".join(side.report.get("checked") or []) or "none"
        self.flags.append(
            f"compile-only: extensions compiled ({names}); nothing was run, so no reward"
        )
        return self.make(
            compiled=True,
            correct=False,
            speedup=0.0,
            reference_cost=None,
            candidate_cost=None,
            tests_passed=0,
        )

    def judge(self, reference: _Side, candidate: _Side) -> Feedback:
        assert reference.tensors is not None
        self.flags += self._screen(reference.tensors)
        early = self._run_failure(candidate)
        if early is not None:
            return early
        assert candidate.tensors is not None
        expected, got = reference.tensors, candidate.tensors
        outcomes = []
        for number in range(CHECK_SEEDS):
            problem = self._compare(expected["check"][number], got["check"][number])
            if problem is None and number in candidate.report.get("aliased", []):
                self.flags.append("aliasing: the output shares memory with an input")
                problem = "the output shares memory with an input (return a new tensor)"
            if problem is None:
                problem = self._inputs_changed(expected["after"][number], got["after"][number])
            if problem is None:
                again = self._compare(expected["check"][number], got["again"][number])
                if again is not None:
                    self.flags.append(
                        f"nondeterministic: seed {number} was right once and wrong when run again"
                    )
                    problem = f"second run: {again}"
            outcomes.append(
                TestOutcome(
                    index=number,
                    status="passed" if problem is None else "wrong_answer",
                    detail=problem or "",
                )
            )
        failures = [outcome for outcome in outcomes if outcome.status != "passed"]
        if failures:
            first = failures[0]
            return self.failed(
                "wrong_answer",
                f"seed {first.index}: {first.detail}",
                tests_passed=len(outcomes) - len(failures),
                tests=outcomes,
            )
        positions = reference.report.get("kept_positions", [])
        if candidate.report.get("kept_positions") != positions or len(got["timed"]) != len(
            positions
        ):
            return self.failed(
                "wrong_answer",
                "the outputs of the timed calls are missing",
                tests_passed=CHECK_SEEDS,
                tests=outcomes,
            )
        for position, want, have in zip(positions, expected["timed"], got["timed"]):
            problem = self._compare(want, have)
            if problem is not None:
                self.flags.append(
                    "caching: a timed call's output differs from the reference (outputs must be "
                    "computed on every call)"
                )
                return self.failed(
                    "wrong_answer",
                    f"timed call {position + 1}: {problem}",
                    tests_passed=CHECK_SEEDS,
                    tests=outcomes,
                )
        return self._timed(reference, candidate, outcomes)

    def _run_failure(self, candidate: _Side) -> Feedback | None:
        report, result = candidate.report, candidate.sandbox
        stage = report.get("stage")
        if stage == "compile_error":
            detail = str(report.get("detail") or report.get("message") or "")
            return self.failed(
                "compile_error",
                _first_error(str(report.get("message", "")), detail),
                compiled=False,
                compile_output=bounded_diagnostics(detail),
            )
        if result.limit_hit == "wall":
            return self.failed("timeout", f"no result within {self.task.timeout_s:g} s (killed)")
        if result.limit_hit == "memory":
            return self.failed("memory_limit", f"memory limit ({self.task.memory_mb} MiB) hit")
        if result.limit_hit == "output":
            return self.failed("output_limit", "wrote more than the file-size limit (killed)")
        if stage == "ok" and candidate.tensors is not None:
            return None
        if report:
            message = str(report.get("message") or "failed")
            return self.failed("runtime_error", message.splitlines()[0][:500])
        signal_part = f"signal {result.signal}" if result.signal else f"exit {result.exit_code}"
        why = _last_line(result.stderr)
        return self.failed("runtime_error", f"the candidate's process died ({signal_part}) {why}")

    def _timed(self, reference: _Side, candidate: _Side, outcomes: list[TestOutcome]) -> Feedback:
        ref_times = reference.report["times"]
        cand_times = candidate.report["times"]["candidate"]
        overhead = reference.markers.per_call("O", len(ref_times["overhead"])) or 0.0
        host_reference = reference.markers.per_call("K", len(ref_times["eager"]))
        host_candidate = candidate.markers.per_call("K", len(cand_times))
        timings = {
            "reference": _stats(ref_times["eager"], _net(host_reference, overhead)),
            "candidate": _stats(cand_times, _net(host_candidate, overhead)),
        }
        if "compile" in ref_times:
            timings["compile"] = _stats(ref_times["compile"], None)
        if ref_times.get("overhead"):
            # An identity model timed the same way: the fixed cost in every timed call (on
            # CUDA, the flush and the device-wide sync), which no kernel can go below.
            timings["harness"] = _stats(ref_times["overhead"], None)
        floor = 1e-7
        reference_cost = max(timings["reference"].median_s, floor)
        candidate_cost = max(timings["candidate"].median_s, floor)
        speedup = reference_cost / candidate_cost
        speedup = self._host_check(speedup, timings, cand_times)
        report = candidate.report
        if report.get("threads_after", 0) > report.get("threads_before", 0):
            grown = report["threads_after"] - report["threads_before"]
            self.flags.append(f"threads: the candidate started {grown} thread(s) while timed")
        if report.get("torch_threads_after") != report.get("torch_threads_before"):
            self.flags.append(
                "threads: the candidate changed torch's thread count "
                f"({report.get('torch_threads_before')} -> {report.get('torch_threads_after')})"
            )
        roofline = _roofline(reference.report.get("roofline"), candidate_cost)
        if roofline is not None and self.settings.device == "cuda":
            speedup, roofline = self._cap_at_light(speedup, reference_cost, roofline)
        if speedup > IMPLAUSIBLE_SPEEDUP:
            self.flags.append(f"implausible: {speedup:.0f}x faster than eager; check it by hand")
        vs_compile = None
        if "compile" in timings:
            vs_compile = max(timings["compile"].median_s, floor) / candidate_cost
        profiles = {}
        profile_seconds = None
        if self.settings.profile:
            spent = [side.report.get("profile_seconds") for side in (reference, candidate)]
            profile_seconds = sum(float(s) for s in spent if isinstance(s, (int, float)))
        for name, side in (("reference", reference), ("candidate", candidate)):
            try:
                profiles[name] = ForwardProfile.model_validate(side.report.get("profile"))
            except ValidationError:
                continue  # not asked for, or a candidate that broke its own report
        return self.make(
            compiled=True,
            correct=True,
            speedup=speedup,
            reference_cost=reference_cost,
            candidate_cost=reference_cost / speedup,
            tests_passed=len(outcomes),
            tests=outcomes,
            reference_costs=[reference_cost],
            candidate_costs=[reference_cost / speedup],
            repeats=len(cand_times),
            timings=timings,
            speedup_vs_compile=vs_compile,
            profiles=profiles,
            profile_seconds=profile_seconds,
            roofline=roofline,
        )

    def _cap_at_light(
        self, speedup: float, reference_cost: float, roofline: Roofline
    ) -> tuple[float, Roofline]:
        """A candidate faster than moving its bytes once (by more than ``ROOFLINE_SLACK``) did
        not do the work while timed, or skips inputs the task reads: flagged, reward capped."""
        limit_s = roofline.memory_floor_s / ROOFLINE_SLACK
        claimed_s = reference_cost / speedup
        if claimed_s >= limit_s:
            return speedup, roofline
        self.flags.append(
            f"implausible: faster than the speed of light ({claimed_s * 1e6:.2f} us per call, "
            f"but moving its {roofline.bytes / 1e6:.2f} MB once takes "
            f"{roofline.memory_floor_s * 1e6:.2f} us at the measured "
            f"{roofline.byte_rate / 1e9:.0f} GB/s); reward capped at {ROOFLINE_SLACK:g}x that"
        )
        capped = reference_cost / limit_s
        return min(speedup, capped), roofline.model_copy(
            update={"capped": True, "fraction": roofline.floor_s / limit_s}
        )

    def _host_check(
        self, speedup: float, timings: dict[str, TimingStats], cand_times: list[float]
    ) -> float:
        """In-process timings must account for the host time the timed calls took."""
        host = timings["candidate"].host_s
        if host is None:
            self.flags.append("timing: no host time stamps from the candidate's timed calls")
            return speedup
        claimed = statistics.fmean(cand_times)
        if claimed >= _HOST_SHARE * host or (host - claimed) * len(cand_times) < _HOST_SLACK_S:
            return speedup
        reference_host = timings["reference"].host_s
        if not reference_host:
            # The reference's own host time is lost in the noise: no estimate to fall back on.
            self.flags.append(
                f"timing: in-process timings disagree with host time ({claimed * 1e3:.3f} ms "
                f"claimed, {host * 1e3:.3f} ms seen per call)"
            )
            return speedup
        by_host = reference_host / max(host, 1e-9)
        self.flags.append(
            f"timing: in-process timings disagree with host time ({claimed * 1e3:.3f} ms claimed, "
            f"{host * 1e3:.3f} ms seen per call); host time used ({by_host:.2f}x)"
        )
        return min(speedup, by_host)

    def _compare(self, expected: list[Any], got: list[Any]) -> str | None:
        if len(got) != len(expected):
            return f"{len(got)} outputs, expected {len(expected)}"
        for position, (want, have) in enumerate(zip(expected, got)):
            problem = self._compare_one(want, have)
            if problem is not None:
                where = f"output {position}: " if len(expected) > 1 else ""
                return where + problem
        return None

    def _compare_one(self, want: Any, have: Any) -> str | None:
        torch = self.torch
        if type(have) is not torch.Tensor:
            return f"a {type(have).__name__}, not a torch.Tensor"
        if have.dtype != want.dtype:
            return f"dtype {str(have.dtype).removeprefix('torch.')}, expected " + str(
                want.dtype
            ).removeprefix("torch.")
        if have.shape != want.shape:
            return f"shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if not want.is_floating_point():
            if torch.equal(have, want):
                return None
            mismatched = int((have != want).sum())
            return f"{mismatched} of {want.numel()} values differ (exact match needed)"
        tolerance = self._tolerance(want.dtype)
        if torch.allclose(have, want, atol=tolerance, rtol=tolerance, equal_nan=True):
            return None
        difference = (have.double() - want.double()).abs()
        bound = tolerance + tolerance * want.double().abs()
        bad = ~(difference <= bound) & ~(have.isnan() & want.isnan())
        worst = float(difference.nan_to_num(float("inf")).max())
        return (
            f"{int(bad.sum())} of {want.numel()} values outside tolerance {tolerance:g} "
            f"(max abs diff {worst:.3g})"
        )

    def _tolerance(self, dtype: Any) -> float:
        if self.settings.tolerance is not None:
            return self.settings.tolerance
        return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-2)

    def _inputs_changed(self, expected: list[Any], got: list[Any]) -> str | None:
        torch = self.torch
        for position, (want, have) in enumerate(zip(expected, got)):
            same = (
                type(have) is torch.Tensor
                and have.dtype == want.dtype
                and have.shape == want.shape
                and torch.equal(have.nan_to_num(0.0), want.nan_to_num(0.0))
            )
            if not same:
                self.flags.append(f"inputs: the candidate changed input {position} in place")
                return f"input {position} was changed by the call (inputs must stay unchanged)"
        return None

    def _screen(self, tensors: dict[str, Any]) -> list[str]:
        """Findings about the task itself, from the reference's outputs."""
        torch = self.torch
        found = []
        outputs = [values for values in tensors["check"]]
        floating = [
            values for values in outputs if all(value.is_floating_point() for value in values)
        ]
        if floating:

            def passes(make: Any) -> bool:
                return all(
                    self._compare(values, [make(value) for value in values]) is None
                    for values in floating
                )

            if passes(torch.zeros_like):
                found.append("task: an all-zeros output passes the tolerance")
            elif passes(lambda value: torch.full_like(value, float(value.double().mean()))):
                found.append("task: a constant output passes the tolerance")
        if len(outputs) > 1 and all(self._compare(outputs[0], other) is None for other in outputs):
            found.append("task: the output is the same for every input")
        for first, again in zip(tensors["check"], tensors["again"]):
            if self._compare(first, again) is not None:
                found.append("task: the reference disagrees with itself when run twice")
                break
        for before, after in zip(tensors["before"], tensors["after"]):
            if any(
                not self.torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
                for a, b in zip(before, after)
            ):
                found.append("task: the reference changes its inputs in place")
                break
        return found


def _net(host: float | None, overhead: float) -> float | None:
    return None if host is None else max(host - overhead, 0.0)


def _first_error(message: str, detail: str) -> str:
    for line in detail.splitlines():
        if "error" in line.lower() and ("candidate" in line or ".cpp" in line or ".cu" in line):
            return line.strip()[:500]
    return (message.splitlines()[0] if message else "the candidate failed to build")[:500]
