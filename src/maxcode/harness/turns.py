"""Turns: the CPU a timed window runs on, one evaluation at a time, whichever process asks;
which CPU that is, and how many seconds of timing one evaluation may spend (every kind).

Two evaluations timing on one CPU at once share it call by call, and each sees the other's
slices in its host time, which the integrity checks rightly take for hidden work (an honest
KernelBench candidate was voided that way: docs/measurements/noise-log.md). An evaluation takes
its timing CPU's turn around its timed window alone (its start-up, builds and checks run
beside others), as a GPU evaluation takes the GPU's for a whole round (runner
``device_turn``). A search's own workers (``LocalExecutor``) time on different CPUs and never
wait for each other; two searches on one machine take turns on the CPU they share.

The locks, a CPU's and a GPU's, live in one folder for the whole machine, not in the
temporary folder: processes with different ``TMPDIR`` (each test of the suite has its own)
time on the same CPUs and GPUs."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
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
    folder = path.parent
    try:
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            folder.chmod(0o1777)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise MaxcodeError(f"cannot take {what}: {path}: {error.strerror}") from None
    try:
        with contextlib.suppress(OSError):
            os.fchmod(descriptor, 0o666)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing lets the lock go


@contextlib.contextmanager
def cpu_turn(cpu: int | None) -> Iterator[None]:
    """CPU ``cpu`` alone for a timed window (None: the window is not pinned, nothing)."""
    if cpu is None:
        yield
        return
    with exclusive(TURNS / f"cpu-{cpu}.lock", f"CPU {cpu}'s turn"):
        yield


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
