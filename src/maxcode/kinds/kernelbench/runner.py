"""Sandboxed worker runs: the job folder, the secret seeds, one run of the ``worker`` package per
role with its conversation on descriptor 3, and what the run left (``Ran``)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.resources
import importlib.util
import os
import re
import secrets
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from maxcode.config import cache_dir
from maxcode.errors import TaskError
from maxcode.harness.runs import python_paths as interpreter_paths
from maxcode.harness.sandbox import Limits, Run, Sandbox, SandboxResult, make_scratch
from maxcode.harness.turns import gpu_turn
from maxcode.kinds.kernelbench.channel import Conversation
from maxcode.kinds.kernelbench.evidence import WorkerReport, read_report
from maxcode.kinds.kernelbench.problem import KernelBenchTask, reference_failure
from maxcode.kinds.kernelbench.schedule import TimedPlan
from maxcode.kinds.kernelbench.settings import CHECK_SEEDS, WARMUP_SEEDS, KernelBenchSettings
from maxcode.kinds.kernelbench.worker.protocol import SEGMENT_BYTES, Phase, WorkerSpec

_FILE_BYTES = 1 << 30
"""The largest file a worker may write (its result, a candidate's extension build, compile
caches): a bound on what a candidate can put on disk."""
_COLLECTED_CHARS = 1 << 20
MAPPED_BYTES = 256 << 20
"""The least block a worker's allocator maps on its own rather than taking from the heap."""


@dataclass(frozen=True)
class Seeds:
    """Secret seeds of one evaluation, each drawn on its own: the weights (in the spec: weights
    are not inputs), the warm-up inputs (in the spec), the checks (sent after warm-up). The
    timed calls' seeds are drawn per call by ``TimedPlan`` and sent per chunk. ``layout``
    shifts both workers' address layouts alike (worker ``layout.fix_layout``): no secret, only a
    draw per round."""

    init: int
    warmup: list[int]
    check: list[int]
    layout: int = 0

    @classmethod
    def fresh(cls) -> Seeds:
        draw = secrets.SystemRandom()
        return cls(
            init=draw.randrange(2**31),
            warmup=[draw.randrange(2**63) for _ in range(WARMUP_SEEDS)],
            check=[draw.randrange(2**63) for _ in range(CHECK_SEEDS)],
            layout=draw.randrange(2**41),
        )


@dataclass(frozen=True)
class Job:
    """The read-only folder a worker reads: the problem, the candidate, the worker itself."""

    folder: Path
    seeds: Seeds

    @classmethod
    def write(cls, task: KernelBenchTask, candidate: str) -> Job:
        folder = make_scratch("maxcode-kb-job-")
        os.chmod(folder, 0o755)
        write_readable(folder / "problem.py", task.reference)
        write_readable(folder / "candidate.py", candidate)
        # The worker's package whole (the runs import it from there, none of maxcode's).
        job = cls(folder, Seeds.fresh())
        job.worker.mkdir(parents=True)
        for made in (job.worker.parent, job.worker):
            os.chmod(made, 0o755)
        for name, text in worker_sources():
            write_readable(job.worker / name, text)
        return job

    @property
    def worker(self) -> Path:
        """The worker's package in the job folder (``python3 -I -B WORKER ARGUMENT``)."""
        return self.folder / "harness" / "worker"

    def spec(self, task: KernelBenchTask, settings: KernelBenchSettings) -> WorkerSpec:
        """What every run of this job reads: no seed of a checked or timed input (the role is
        the run's: ``WorkerRunner.write_spec``)."""
        return WorkerSpec(
            role="",
            problem=str(self.folder / "problem.py"),
            candidate=str(self.folder / "candidate.py"),
            overrides=dict(task.scaling.overrides),
            device=settings.device,
            init_seed=self.seeds.init,
            warmup_seeds=list(self.seeds.warmup),
            **settings.worker_timing(),
            profile=settings.profile,
            backend=settings.kernel_backend(),
            timed=settings.timed,
            segment_bytes=SEGMENT_BYTES,
        )

    def again(self) -> Job:
        """The same folder with fresh seeds (another round of one evaluation)."""
        return Job(self.folder, Seeds.fresh())

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Ran:
    """What one worker run left: its report, its sandbox result, its conversation (host
    stamps; its outputs went to the schedule's ``checked`` and ``kept``)."""

    report: WorkerReport | None
    """None when the worker left no report, or a malformed one (``problem`` says which)."""
    checked: bool
    """Every check seed's tensors came."""
    sandbox: SandboxResult
    conversation: Conversation | None
    problem: str | None = None
    """Why the report or the tensors are missing or malformed (an ``evidence`` finding)."""
    collected: str = ""
    """The text of a file the run was asked to leave (ncu's log), bounded."""

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.stage == "ok" and self.checked


@functools.cache
def worker_sources() -> tuple[tuple[str, str], ...]:
    """The modules of the worker's package, (file name, source) in order of their names: read
    once per process, written into every job."""
    package = importlib.resources.files("maxcode.kinds.kernelbench.worker")
    return tuple(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in sorted(package.iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith(".py")
    )


def python_paths() -> list[Path]:
    """What the worker's interpreter needs to see: its installation and the packages of torch,
    ninja and triton (wherever each is installed)."""
    return interpreter_paths(("torch", "ninja", "triton"))


def write_readable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o644)


def cache_folder(kind: str, source: str) -> Path:
    """A build folder per source (extensions, inductor's cache); only runs of that source
    see it, so one candidate cannot plant a build another will load."""
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    folder = cache_dir("kernelbench") / f"{kind}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    # Each sandboxed run has a uid of its own; all runs of this source share the folder.
    os.chmod(folder, 0o777)
    return folder


@dataclass
class WorkerRunner:
    sandbox: Sandbox
    task: KernelBenchTask
    settings: KernelBenchSettings
    job: Path
    python_paths: list[Path]
    cpu: int | None
    layout: int = 0
    """The round's layout seed (``Seeds.layout``), the same for all of its runs."""

    def run(
        self,
        role: str,
        spec: WorkerSpec,
        cache: Path,
        *,
        conversation: Conversation | None = None,
        prefix: tuple[str, ...] = (),
        readonly: tuple[Path, ...] = (),
        collect: str | None = None,
        wall_s: float | None = None,
        exclusive: bool = True,
    ) -> Ran:
        """One sandboxed worker run; ``conversation`` serves its descriptor 3, ``prefix`` goes
        before the interpreter (a profiler), ``readonly`` adds folders it must see,
        ``collect`` names a file it leaves behind, ``wall_s`` replaces the task's time limit
        (a run that waits for another's turns); ``exclusive``: hold ``cache`` alone for the run
        (False: the caller holds it, or the run builds nothing there)."""
        spec_path = self.write_spec(role, spec)
        workdir = make_scratch(f"maxcode-kb-{role}-")
        try:
            aux = None if conversation is None else conversation.worker_fd
            try:
                with sole_user(cache) if exclusive else contextlib.nullcontext():
                    result = self.launch(
                        str(spec_path),
                        workdir,
                        cache,
                        aux,
                        wall_s or self.task.timeout_s,
                        prefix=prefix,
                        readonly=readonly,
                        on_start=None if conversation is None else conversation.started,
                    )
            finally:
                if conversation is not None:
                    conversation.close()
            side = read_side(workdir, result, conversation)
            if collect is not None and (workdir / collect).is_file():
                with open(workdir / collect, encoding="utf-8", errors="replace") as handle:
                    side.collected = handle.read(_COLLECTED_CHARS)
            return side
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def write_spec(self, role: str, spec: WorkerSpec, name: str | None = None) -> Path:
        """The spec file of a run of ``role`` in the job folder (named ``name``, else for
        the role)."""
        spec_path = self.job / f"{name or role}.json"
        write_readable(spec_path, replace(spec, role=role).dumps())
        return spec_path

    def limits(self, wall_s: float) -> Limits:
        """A worker's limits, with ``wall_s`` of wall time."""
        cuda = self.settings.device == "cuda"
        return Limits(
            wall_s=wall_s,
            memory_bytes=None if cuda else self.task.memory_mb << 20,
            file_size_bytes=_FILE_BYTES,
            processes=256,
        )

    def pins_late(self) -> bool:
        """Whether a worker pins itself to ``cpu`` once torch is loaded (worker ``layout.pin``)
        rather than being pinned by the sandbox from its start: in an evaluation of one round
        on a CPU, so its two workers load torch side by side on two CPUs (a shorter round, the same
        spread: ``docs/measurements/kernelbench-notes.md``). ``MAXCODE_PIN=start`` pins from the
        start. Several rounds fork their workers from zygotes on the timing CPU (``zygote.py``)."""
        return (
            self.cpu is not None
            and self.settings.device == "cpu"
            and self.settings.rounds == 1
            and os.environ.get("MAXCODE_PIN") != "start"
        )

    def launch(
        self,
        argument: str,
        workdir: Path,
        cache: Path,
        aux: int | None,
        wall_s: float,
        *,
        prefix: tuple[str, ...] = (),
        readonly: tuple[Path, ...] = (),
        on_start: Callable[[int], None] | None = None,
    ) -> SandboxResult:
        """The worker's package run with ``ARGUMENT`` (a spec file, or ``protocol.ZYGOTE``) in
        ``workdir``, until it ends: ``aux`` is its descriptor 3, ``cache`` its writable
        build folder."""
        cuda = self.settings.device == "cuda"
        argv = [*prefix, sys.executable, "-I", "-B", str(self.job / "harness" / "worker"), argument]
        environment = _environment(cache, workdir, self.layout)
        late = self.pins_late()
        if late:
            environment["MAXCODE_CPU"] = str(self.cpu)
        return self.sandbox.run_batch(
            argv,
            [Run(workdir=workdir, aux_fd=aux)],
            readonly=[self.job, *self.python_paths, *readonly],
            writable=[cache],
            limits=self.limits(wall_s),
            cpu=None if late else self.cpu,
            env=environment,
            devices=_gpu_devices() if cuda else (),
            on_start=on_start,
        )[0]


def _environment(cache: Path, workdir: Path, layout: int = 0) -> dict[str, str]:
    environment = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin",
        "TORCH_EXTENSIONS_DIR": str(cache / "extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        # The run's uid has no passwd entry: getpass (torch.compile's import) would fail.
        "USER": "maxcode",
        "LOGNAME": "maxcode",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "CXX": "g++",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # Blocks below MAPPED_BYTES come from the heap and are kept when freed, or every timed
        # call pays page faults for its temporaries, which scatters identical candidates' speedups
        # (docs/measurements/kernelbench-notes.md); a fixed threshold keeps both sides alike. Larger
        # blocks are mapped and handed back, or gigabyte tensors of slightly different sizes cannot
        # reuse each other's room.
        "MALLOC_MMAP_THRESHOLD_": str(MAPPED_BYTES),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
        # Tensors of 2 MiB and more on a page boundary (the huge pages torch also asks for are
        # off, worker ``layout.no_huge_pages``): where a buffer falls within its page otherwise
        # follows each process's heap history: a speed bias that lasts a whole worker.
        "THP_MEM_ALLOC_ENABLE": "1",
        "MAX_JOBS": "2",
    }
    # The layout drawn for this round, the same for both sides (worker ``layout.fix_layout``).
    environment["MAXCODE_LAYOUT_SEED"] = str(layout)
    passing = ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST")
    for passed in passing:
        if passed in os.environ:
            environment[passed] = os.environ[passed]
    return environment


def read_side(workdir: Path, result: SandboxResult, conversation: Conversation | None) -> Ran:
    report = read_report(workdir / "result.json")
    if isinstance(report, str):
        return Ran(None, False, result, conversation, problem=report)
    if report is None or report.stage != "ok" or report.role not in ("reference", "candidate"):
        return Ran(report, False, result, conversation)
    if conversation is None or not conversation.checked:
        missing = "the worker sent no checked tensors"
        return Ran(report, False, result, conversation, problem=missing)
    return Ran(report, True, result, conversation)


@contextlib.contextmanager
def sole_user(cache: Path) -> Iterator[None]:
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


@contextlib.contextmanager
def device_turn(device: str) -> Iterator[None]:
    """On a GPU, the device alone for one round, whichever process asks: an exclusive lock on a
    file per visible GPU (``turns.gpu_turn``), held from before the two workers start until both
    are gone, since two evaluations timing on one GPU see each other's kernels in their host time
    (enough to void an identical candidate: ``docs/measurements/kernelbench-notes.md``). The GPU is
    read from ``CUDA_VISIBLE_DEVICES`` as written: one GPU named two ways is not kept apart. On a
    CPU, nothing here."""
    if device != "cuda":
        yield
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    with gpu_turn(visible):
        yield


def _gpu_devices() -> list[str]:
    found = [str(path) for path in Path("/dev").glob("nvidia*")]
    return [*found, "/dev/dri"] if found else []


def check_reference(task: KernelBenchTask, side: Ran, timed: bool = True) -> None:
    """A reference that does not run (or whose run broke the protocol) is the task's error
    (``timed``: its timed calls must all have run too)."""
    report, result = side.report, side.sandbox
    conversation = side.conversation
    problem = side.problem or (conversation.problem if conversation is not None else None)
    ran = conversation is not None and (conversation.complete(Phase.PAIRS) or not timed)
    if side.ok and problem is None and ran:
        return
    if report is not None and report.stage != "ok":
        why = (report.message or "failed").splitlines()[0]
        where = _failing_frame(report.detail)
        if where:
            why = f"{why} ({where})"
    elif result.limit_hit and result.wall_s > 0:
        # A run killed at a limit breaks its conversation too: name the limit.
        why = limit_message(task, result.limit_hit)
    elif result.signal:
        # Killed from outside (the OOM killer when the machine runs out of memory).
        why = f"the reference's process was killed (signal {result.signal})"
        if result.signal == signal.SIGKILL:
            why += "; the machine may have run out of memory (try a smaller --scale)"
    elif problem is not None:
        why = problem
    else:
        why = last_line(result.stderr) or f"exit code {result.exit_code}"
    raise TaskError(reference_failure(task, why))


def limit_message(task: KernelBenchTask, limit: str) -> str:
    """What a run killed at ``limit`` is told (the reference's and the candidate's alike)."""
    if limit == "wall":
        return f"no result within {task.timeout_s:g} s (killed)"
    if limit == "memory":
        return f"memory limit ({task.memory_mb} MiB) hit"
    if limit == "output":
        return "wrote more than the file-size limit (killed)"
    return f"{limit} limit hit"


def _failing_frame(detail: str) -> str:
    """``file:line`` of the innermost frame of a worker's traceback ('' when there is none):
    a reference that fails inside a library needs the place named, not just the error."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', detail)
    if not frames:
        return ""
    path, line = frames[-1]
    return f"at {Path(path).name}:{line}" if "maxcode-kb-job" in path else f"at {path}:{line}"


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


__all__ = [
    "Job",
    "Ran",
    "Seeds",
    "TimedPlan",
    "WorkerRunner",
    "cache_folder",
    "limit_message",
    "python_paths",
]
