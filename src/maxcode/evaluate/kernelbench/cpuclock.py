"""CPU time of a sandboxed worker, read by the parent from outside the sandbox.

The worker runs the candidate's code, so nothing it says about its own CPU time is trusted.
The kernel keeps a CPU clock per process (every thread it ever had, on any CPU, to the
nanosecond) that any process may read by pid (``clock_gettime`` on the clock id of
``clock_getcpuclockid``); the parent reads its workers' clocks at the stamps of every chunk.
Unlike the wall clock, a process's CPU clock does not run while another program holds its
CPU, so work a candidate moves out of its timed calls shows against the reference's with
little of the load's noise.

Processes are found in ``/proc`` from the pid the sandbox started: the first ``maxcode-init``
below it is the run's trusted init (a candidate may name a process of its own so, but only
below the init), and the worker is the init's first child (the init starts the run's program
before anything of the run can start another process). Work in the run's other processes
(children of the worker, orphans the init reaped) is counted separately (``others_ns``): the
reference has none while timed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

INIT_NAME = b"maxcode-init"
_TICK_NS = 1_000_000_000 // max(os.sysconf("SC_CLK_TCK"), 1)


def process_cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds of every thread process ``pid`` ever ran; None once it is gone."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2)  # CPUCLOCK_SCHED of the process
    except (OSError, OverflowError):
        return None


def _stat(pid: int) -> tuple[bytes, list[bytes]] | None:
    """``/proc/PID/stat``: the name and the fields after it (index = field number - 3)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    close = raw.rfind(b")")
    return raw[raw.find(b"(") + 1 : close], raw[close + 2 :].split()


def _reaped_ns(pid: int) -> int:
    """CPU time of ``pid``'s children that it has reaped (whole clock ticks)."""
    stat = _stat(pid)
    if stat is None or len(stat[1]) < 15:
        return 0
    return (int(stat[1][13]) + int(stat[1][14])) * _TICK_NS


def _children() -> dict[int, list[tuple[int, int]]]:
    """Every process's children as (start time, pid), from one pass over ``/proc``."""
    found: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or len(stat[1]) < 20:
            continue
        found.setdefault(int(stat[1][1]), []).append((int(stat[1][19]), int(entry)))
    return found


def _below(root: int, children: dict[int, list[tuple[int, int]]]) -> list[int]:
    """``root`` and its descendants, breadth first."""
    order, at = [root], 0
    while at < len(order):
        order += [pid for _, pid in sorted(children.get(order[at], []))]
        at += 1
    return order


def find_worker(root: int) -> tuple[int, int] | None:
    """(init, worker) of the sandboxed run started as ``root``; None when not found."""
    children = _children()
    for pid in _below(root, children):
        stat = _stat(pid)
        if stat is not None and stat[0] == INIT_NAME:
            first = sorted(children.get(pid, []))
            return (pid, first[0][1]) if first else None
    return None


def others_ns(init: int, worker: int) -> int:
    """CPU nanoseconds of the run's processes other than the worker: the live ones' clocks,
    and what the worker, the init and the others reaped of their children (whole ticks)."""
    total = _reaped_ns(init) + _reaped_ns(worker)
    for pid in _below(init, _children())[1:]:
        if pid != worker:
            total += (process_cpu_ns(pid) or 0) + _reaped_ns(pid)
    return total
