"""Sandboxed worker runs: the job folder and a round's secret seeds (``Job``, ``Seeds``), one
run of the ``worker`` package per role with its conversation on descriptor 3 (``WorkerRunner``),
or a round's two workers forked from a zygote per side (``Zygotes``: on a CPU over several
rounds, torch imported once per side instead of once per worker; each zygote in its side's
sandbox, serving no other program, so the candidate's rounds fork from a process no code of the
candidate's ran in).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.resources
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from maxcode.harness.runs import python_paths
from maxcode.harness.sandbox import (
    Limits,
    Pin,
    Run,
    Sandbox,
    SandboxResult,
    head_and_tail,
    kill_group,
    make_scratch,
    reported_result,
)
from maxcode.harness.turns import CpuTurn, gpu_turn
from maxcode.home import cache_dir
from maxcode.kinds.kernelbench.evidence import Ran
from maxcode.kinds.kernelbench.listener import Conversation
from maxcode.kinds.kernelbench.parameters import CHECK_SEEDS, WARMUP_SEEDS, KernelBenchSettings
from maxcode.kinds.kernelbench.problem import KernelBenchTask
from maxcode.kinds.kernelbench.worker.protocol import SEGMENT_BYTES, ZYGOTE, WorkerSpec

_FILE_BYTES = 1 << 30
"""The largest file a worker may write: a bound on what a candidate can put on disk."""
_COLLECTED_CHARS = 1 << 20
MAPPED_BYTES = 256 << 20
"""The least block a worker's allocator maps on its own rather than taking from the heap."""
ROUNDS_PER_PAIR = 8
"""Rounds forked from one pair of zygotes: where a zygote's libraries, stack and pages landed
is a draw its forks share (``docs/measurements/kernelbench-notes.md``)."""
_ANSWER_SLACK_S = 10.0
"""Seconds a zygote may take past a round's time limit to answer (kill, sweep, reap)."""
_CLOSE_S = 5.0
"""Seconds a zygote may take to end once its socket is closed, before it is killed."""
_ANSWER_BYTES = 1 << 16


@dataclass(frozen=True)
class Seeds:
    """Secret seeds of one round: the weights' and the warm-up's (in the spec), the checks'
    (sent after warm-up; the timed calls' are ``schedule.TimedPlan``'s). ``layout`` shifts both
    workers' address layouts alike (worker ``layout.fix_layout``): a draw, not a secret."""

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
        """What every run of this job reads (the role is the run's: ``write_spec``)."""
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


@functools.cache
def worker_sources() -> tuple[tuple[str, str], ...]:
    """The worker package's modules, (file name, source), read once per process."""
    package = importlib.resources.files("maxcode.kinds.kernelbench.worker")
    return tuple(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in sorted(package.iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith(".py")
    )


def worker_paths() -> list[Path]:
    """What the worker's interpreter needs to see: its installation, torch, ninja, triton."""
    return python_paths(("torch", "ninja", "triton"))


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
    """Runs of one job's worker in ``sandbox``, pinned to ``cpu``, seeing ``paths``."""

    sandbox: Sandbox
    task: KernelBenchTask
    settings: KernelBenchSettings
    job: Path
    paths: list[Path]
    cpu: int | None
    layout: int = 0
    """The round's layout seed (``Seeds.layout``), the same for all of its runs."""
    headers: Path | None = None
    """The precompiled torch headers the candidate's builds may use (``headers``)."""
    elsewhere: frozenset[int] = frozenset()
    """Where the workers start when the round waits for ``cpu``'s turn (``turns.CpuTurn``):
    there until their first timed chunk, when the parent moves them to ``cpu`` (listener
    ``_move_to``: a worker cannot move itself); empty: started as ``pins_late`` says, the turn
    held."""

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
        """One sandboxed worker run: ``conversation`` on its descriptor 3, ``prefix`` before
        the interpreter (a profiler), ``readonly`` folders it must see, ``collect`` a file it
        leaves, ``wall_s`` for the task's time limit; ``exclusive``: hold ``cache`` alone."""
        spec_path = self.write_spec(role, spec)
        workdir = make_scratch(f"maxcode-kb-{role}-")
        try:
            try:
                with sole_user(cache) if exclusive else contextlib.nullcontext():
                    result = self.launch(
                        str(spec_path),
                        workdir,
                        cache,
                        None if conversation is None else conversation.worker_fd,
                        wall_s or self.task.timeout_s,
                        prefix=prefix,
                        readonly=readonly,
                        on_start=None if conversation is None else conversation.started,
                    )
            finally:
                if conversation is not None:
                    conversation.close()
            side = Ran.read(workdir, result, conversation)
            if collect is not None and (workdir / collect).is_file():
                with open(workdir / collect, encoding="utf-8", errors="replace") as handle:
                    side.collected = handle.read(_COLLECTED_CHARS)
            return side
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def write_spec(self, role: str, spec: WorkerSpec, name: str | None = None) -> Path:
        """The spec file of a run of ``role`` in the job folder (``name``, else the role's)."""
        spec_path = self.job / f"{name or role}.json"
        write_readable(spec_path, replace(spec, role=role).dumps())
        return spec_path

    def limits(self, wall_s: float) -> Limits:
        cuda = self.settings.device == "cuda"
        return Limits(
            wall_s=wall_s,
            memory_bytes=None if cuda else self.task.memory_mb << 20,
            file_size_bytes=_FILE_BYTES,
            processes=256,
        )

    def pins_late(self) -> bool:
        """Whether the workers start on ``cpu`` and one other free CPU, and are moved to ``cpu``
        alone once torch is loaded (listener ``_loaded``), rather than start there: in one round
        on a CPU, so the two workers load torch on two CPUs
        (``docs/measurements/kernelbench-notes.md``; ``MAXCODE_PIN=start``: not)."""
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
        """The worker's package run with ``argument`` (a spec file, or ``protocol.ZYGOTE``) in
        ``workdir``: ``aux`` its descriptor 3, ``cache`` its writable build folder."""
        cuda = self.settings.device == "cuda"
        argv = [*prefix, sys.executable, "-I", "-B", str(self.job / "harness" / "worker"), argument]
        environment = _environment(cache, workdir, self.layout)
        seen = [self.job, *self.paths, *readonly]
        if self.headers is not None:
            environment["CPATH"] = str(self.headers)
            seen.append(self.headers)
        # Moved to ``cpu`` by the parent before their first timed chunk (listener ``_move_to``).
        where: Pin = self.cpu
        if self.elsewhere:
            where = self.elsewhere
        elif self.cpu is not None and self.pins_late():
            where = frozenset({self.cpu}) | CpuTurn(self.cpu).elsewhere
        return self.sandbox.run_batch(
            argv,
            [Run(workdir=workdir, aux_fd=aux)],
            readonly=seen,
            writable=[cache],
            limits=self.limits(wall_s),
            cpu=where,
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
        # Below MAPPED_BYTES from the heap and kept when freed (no page faults per call); a
        # fixed threshold keeps both sides alike (docs/measurements/kernelbench-notes.md).
        "MALLOC_MMAP_THRESHOLD_": str(MAPPED_BYTES),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
        # Tensors of 2 MiB and more on a page boundary, not where each heap's history puts them.
        "THP_MEM_ALLOC_ENABLE": "1",
        "MAX_JOBS": "2",
        "MAXCODE_LAYOUT_SEED": str(layout),
    }
    for passed in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST"):
        if passed in os.environ:
            environment[passed] = os.environ[passed]
    return environment


def _gpu_devices() -> list[str]:
    found = [str(path) for path in Path("/dev").glob("nvidia*")]
    return [*found, "/dev/dri"] if found else []


@contextlib.contextmanager
def sole_user(cache: Path) -> Iterator[None]:
    """Hold a build folder alone for one worker run; torch's ``lock`` files there are then
    stale (a killed build leaves one, which later builds would wait on forever)."""
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
    """On a GPU, the device alone for one round (``turns.gpu_turn`` on ``CUDA_VISIBLE_DEVICES``
    as written), from before the two workers start until both are gone: two evaluations on one
    GPU see each other's kernels (``docs/measurements/kernelbench-notes.md``)."""
    if device != "cuda":
        yield
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    with gpu_turn(visible):
        yield


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
        self.ended: SandboxResult | None = None
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
        self._drop_theirs()

    def _drop_theirs(self) -> None:
        if self._theirs.fileno() != -1:
            self._theirs.close()

    def run(self, spec: WorkerSpec, conversation: Conversation, wall_s: float, layout: int) -> Ran:
        """One round's worker of this side: ``spec`` (the round's seeds), ``conversation`` on
        its descriptor 3, killed after ``wall_s``, its layout shifted by ``layout``; on the
        zygote's CPU until the parent moves it to the timing CPU before its first timed chunk
        (listener ``_move_to``)."""
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
            while self._root is None and self._thread.is_alive():  # until the sandbox started it
                self._thread.join(timeout=0.01)
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
                return Ran.read(folder, result, conversation)
            # Without the zygote's account of the round, the worker's report is not evidence.
            side = Ran.read(folder, self._lost(wall_s, stdout, stderr), conversation)
            side.problem = side.problem or f"the {self.role}'s zygote did not answer"
            return side
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # what the round wrote, read

    def _lost(self, wall_s: float, stdout: bytes, stderr: str) -> SandboxResult:
        """The round's result when its zygote did not answer: the zygote ended, the round read
        as its run ended (at a limit, by a signal), else as killed at its time limit."""
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
        """End the zygote (killed if it does not end), and with ``remove`` its folder."""
        if self._control.fileno() != -1:
            self._control.close()
        self._thread.join(timeout=_CLOSE_S)
        if self._thread.is_alive() and self._root is not None:
            kill_group(self._root)
            self._thread.join()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)


def pair_wall_s(timeout_s: float, settings: KernelBenchSettings) -> float:
    """How long a pair of zygotes may live: both sides' timeouts and the timing budget for each
    round it serves (``ROUNDS_PER_PAIR``, or the cap and one held for confirmation)."""
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
    """The two sides' zygotes of one evaluation and their job folder (``Job.again`` per round)."""

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
        headers: Path | None = None,
    ) -> Zygotes:
        """Both zygotes, on ``cpu``, for the rounds one pair serves (``pair_wall_s``)."""
        job = Job.write(task, candidate)
        layout = Seeds.fresh().layout  # the evaluation's: the stack and torch's libraries
        # Off the timing CPU, where another evaluation may be timing: each round's forks are
        # moved to it before their first timed chunk (listener ``_move_to``).
        elsewhere = CpuTurn(cpu).elsewhere
        runner = WorkerRunner(
            sandbox, task, settings, job.folder, paths, cpu, layout, headers, elsewhere
        )
        wall_s = pair_wall_s(task.timeout_s, settings)
        reference = Zygote(runner, "reference", cache_folder("ref", task.reference), wall_s)
        return cls(
            job, reference, Zygote(runner, "candidate", cache_folder("cand", candidate), wall_s)
        )

    @property
    def rounds(self) -> int:
        return self.reference.forked

    def side(self, role: str) -> Zygote:
        return self.reference if role == "reference" else self.candidate

    def close(self) -> None:
        self.reference.close()
        self.candidate.close()
        self.job.remove()
