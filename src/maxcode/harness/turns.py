"""Turns: the CPU a timed window runs on, one evaluation at a time, whichever process asks;
which CPU that is, and how many seconds of timing one evaluation may spend (every kind).

Two evaluations timing on one CPU at once share it call by call, and each sees the other's
slices in its host time, which the integrity checks rightly take for hidden work (an honest
KernelBench candidate was voided that way: docs/measurements/noise-log.md). An evaluation takes
its timing CPU's turn around its timed window, and its start-up, builds and checks run beside
others on other CPUs: a KernelBench round that finds the turn taken starts its workers there
and waits for it at its first timed chunk (``CpuTurn``; one that finds it free holds it from
its start, its workers on that CPU). A GPU evaluation takes the GPU's turn for a whole round
(runner ``device_turn``). A search's own workers (``LocalExecutor``) time on different CPUs and
never wait for each other; two searches on one machine take turns on the CPU they share.

The locks, a CPU's and a GPU's, live in one folder for the whole machine, not in the
temporary folder: processes with different ``TMPDIR`` (each test of the suite has its own)
time on the same CPUs and GPUs."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from maxcode.errors import MaxcodeError
from maxcode.home import positive_setting

WALL_BUDGET_S = 15.0
"""Seconds of timing (both programs' runs, with each batch's sandbox start and each run's
folder and launch) after which no further batch is started."""
REPORTED = 4
"""A speedup that is reported (``maxcode eval``, a search's re-verification), not a screen of
a search's candidate, is timed to a quarter of the variance: C++'s ``WALL_PRECISION`` halved, the
caps on rounds and seconds times four. Six evaluations of ``prime_sieve``'s reference as its
own candidate at +-2% spread 1.022 (max/min; standard deviation 0.74%), over the 1.02 an
equal program's number should stay within (``benchmarks/noise.py``)."""


TURNS = Path("/tmp/maxcode-turns")
"""Where the CPUs' and GPUs' lock files are (every user's evaluations share the turns)."""


@contextlib.contextmanager
def exclusive(path: Path, what: str) -> Iterator[None]:
    """An exclusive lock on ``path`` (made in a folder every user may write, sticky as
    ``/tmp``) for the block; ``what`` names it in the error when it cannot be taken. Waits
    for the holder, which lets go when its block ends or its process does."""
    descriptor = _open_lock(path, what)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing lets the lock go


def _held(path: Path) -> bool:
    """Whether somebody holds lock file ``path`` now (a shared probe, let go at once)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # never made: never held
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def _open_lock(path: Path, what: str) -> int:
    """A descriptor of lock file ``path`` (its folder made, sticky as ``/tmp``, if missing)."""
    folder = path.parent
    try:
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            folder.chmod(0o1777)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise MaxcodeError(f"cannot take {what}: {path}: {error.strerror}") from None
    with contextlib.suppress(OSError):
        os.fchmod(descriptor, 0o666)
    return descriptor


def _cpu_lock(cpu: int | None) -> Path:
    """CPU ``cpu``'s turn, a lock file in ``TURNS``."""
    return TURNS / f"cpu-{cpu}.lock"


class CpuTurn:
    """CPU ``cpu``'s turn for one KernelBench round, held from when it is taken (``now`` while
    nobody holds it; ``take``, waiting, once the round's first timed chunk is due) until
    ``release``. A round that did not get it at once starts its workers on ``elsewhere``, one
    other CPU, so its start-up and checks never run beside another round's timed window on
    this CPU (``cpu`` None: no turn, nothing is held)."""

    def __init__(self, cpu: int | None) -> None:
        self.cpu = cpu
        self.path = _cpu_lock(cpu)
        self._descriptor: int | None = None
        self._lock = threading.Lock()

    @property
    def elsewhere(self) -> frozenset[int]:
        """Where a round that waits for this turn starts its workers: the first CPU this
        process may use, other than the turn's, whose own turn nobody holds now (empty: none,
        or no turn). One CPU, so a round's start-up reaches no other; timing CPUs are handed
        out from the last (``timing_cpu``, ``LocalExecutor``), so it is seldom one."""
        if self.cpu is None:
            return frozenset()
        for other in usable_cpus():
            if other != self.cpu and not _held(_cpu_lock(other)):
                return frozenset({other})
        return frozenset()

    @property
    def held(self) -> bool:
        return self.cpu is None or self._descriptor is not None

    def now(self) -> bool:
        """Take the turn if nobody holds it; whether it is held."""
        return self._take(blocking=False)

    def take(self) -> None:
        """Hold the turn, waiting for whoever holds it (at once when already held)."""
        self._take(blocking=True)

    def _take(self, blocking: bool) -> bool:
        with self._lock:
            if self.held:
                return True
            descriptor = _open_lock(self.path, f"CPU {self.cpu}'s turn")
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(descriptor)
                return False
            except BaseException:
                os.close(descriptor)
                raise
            self._descriptor = descriptor
            return True

    def release(self) -> None:
        with self._lock:
            if self._descriptor is not None:
                os.close(self._descriptor)  # closing lets the lock go
                self._descriptor = None


@contextlib.contextmanager
def cpu_turn(cpu: int | None) -> Iterator[None]:
    """CPU ``cpu`` alone for a timed window (None: the window is not pinned, nothing)."""
    turn = CpuTurn(cpu)
    turn.take()
    try:
        yield
    finally:
        turn.release()


@contextlib.contextmanager
def gpu_turn(gpu: str) -> Iterator[None]:
    """GPU ``gpu`` (as ``CUDA_VISIBLE_DEVICES`` names it) alone for a round."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", gpu)
    with exclusive(TURNS / f"gpu-{name}.lock", "the GPU's turn"):
        yield


def timing_budget_s(scale: float = 1.0) -> float:
    """Seconds of timed runs one evaluation may spend before it stops adding rounds:
    ``MAXCODE_TIMING_BUDGET_S`` when set (a positive number), else ``WALL_BUDGET_S`` times
    ``scale`` (``REPORTED`` for a reported speedup; what a precision asked for costs)."""
    default = WALL_BUDGET_S * scale
    return positive_setting("MAXCODE_TIMING_BUDGET_S", float, default, "a number of seconds")


def usable_cpus() -> list[int]:
    """The CPUs this process may use, in order (all of the machine's where the platform cannot
    say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def timing_cpu() -> int | None:
    """The CPU timed runs are pinned to: the last one this process may use."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return allowed[-1] if len(allowed) > 1 else None
