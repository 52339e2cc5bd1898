"""CPU time of a sandboxed worker, read by the parent from outside the sandbox (nothing the
worker says of its own is trusted): the kernel's CPU clock per process, which does not run
while another program holds the CPU, so work moved out of the timed calls shows with little of
the load's noise. The worker is found in ``/proc`` below the run's ``maxcode-init``
(``find_worker``); its other processes (``others_ns``), huge pages (``huge_pages``) and CPU
affinity (``pinned``) too. The worker cannot change its own affinity (the sandbox's init
forbids it), so the parent moves it to the timing CPU from outside (``pin``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

INIT_NAME = b"maxcode-init"
_TICK_NS = 1_000_000_000 // max(os.sysconf("SC_CLK_TCK"), 1)


def process_cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds of every thread process ``pid`` ever ran; None once it is gone."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2)  # CPUCLOCK_SCHED of the process
    except (OSError, OverflowError):
        return None


def running(pid: int) -> bool:
    """Whether process ``pid``'s main thread is running or runnable (False: gone or blocked)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] == b"R"


def pin(pid: int, cpu: int, passes: int = 50) -> bool:
    """Move every thread of process ``pid`` to CPU ``cpu`` alone; whether all were, once a
    pass found no thread it had not moved (a thread started meanwhile inherits its starter's
    affinity: the next pass finds it). False: a thread could not be moved, or ``pid`` is gone."""
    moved: set[int] = set()
    for _ in range(passes):
        try:
            threads = {int(thread) for thread in os.listdir(f"/proc/{pid}/task")}
        except OSError:
            return False
        if threads <= moved:
            return pinned(pid, cpu) is True
        for thread in threads - moved:
            try:
                os.sched_setaffinity(thread, {cpu})
            except ProcessLookupError:
                pass  # it ended since it was listed
            except OSError:
                return False
            moved.add(thread)
    return False


def pinned(pid: int, cpu: int) -> bool | None:
    """Whether every thread of process ``pid`` may run on CPU ``cpu`` alone (None: it is gone,
    or its threads cannot be read)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        return all(os.sched_getaffinity(int(thread)) == {cpu} for thread in threads)
    except (OSError, ValueError):
        return None


class _Process(NamedTuple):
    """What one pass over ``/proc`` keeps of a process."""

    name: bytes
    parent: int
    start: int
    """Clock ticks after boot."""
    reaped_ns: int
    """CPU time of the children it has reaped (whole clock ticks)."""


def _processes() -> dict[int, _Process]:
    """Every visible process, from one pass over ``/proc/PID/stat`` (fields counted after the
    name: the parent is field 4, the reaped children's user and system times 16 and 17, the
    start time 22)."""
    found: dict[int, _Process] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue  # gone since it was listed
        close = raw.rfind(b")")
        fields = raw[close + 2 :].split()
        if len(fields) < 20:
            continue
        found[int(entry)] = _Process(
            name=raw[raw.find(b"(") + 1 : close],
            parent=int(fields[1]),
            start=int(fields[19]),
            reaped_ns=(int(fields[13]) + int(fields[14])) * _TICK_NS,
        )
    return found


def _children(processes: dict[int, _Process]) -> dict[int, list[int]]:
    """Each parent's children, in the order they started."""
    children: dict[int, list[int]] = {}
    for pid in sorted(processes, key=lambda pid: (processes[pid].start, pid)):
        children.setdefault(processes[pid].parent, []).append(pid)
    return children


def _below(root: int, children: dict[int, list[int]]) -> list[int]:
    """``root`` and its descendants, breadth first, each parent's children in start order."""
    order, at = [root], 0
    while at < len(order):
        order += children.get(order[at], [])
        at += 1
    return order


def find_worker(root: int, forked: bool = False) -> tuple[int, int] | None:
    """(init, worker) of the run started as ``root`` (None: not found): the first
    ``maxcode-init`` below it and its first child, started before anything of the run can start
    a process (``forked``: that child's first child, a zygote's fork)."""
    processes = _processes()
    children = _children(processes)
    for pid in _below(root, children):
        if pid in processes and processes[pid].name == INIT_NAME:
            first = children.get(pid, [])[:1]
            if first and forked:
                first = children.get(first[0], [])[:1]
            return (pid, first[0]) if first else None
    return None


def others_ns(init: int, worker: int) -> int:
    """CPU nanoseconds of the run's processes other than the worker: the live ones' clocks,
    and what the worker, the init and the others reaped of their children (whole ticks)."""
    processes = _processes()
    total = 0
    for pid in _below(init, _children(processes)):
        total += processes[pid].reaped_ns if pid in processes else 0
        if pid not in (init, worker):
            total += process_cpu_ns(pid) or 0
    return total


class HugePages(NamedTuple):
    """A worker's huge pages as ``/proc`` says (None where it did not)."""

    enabled: bool | None
    """``THP_enabled`` of ``/proc/PID/status``: the process may take huge pages."""
    held_kb: int | None
    """Memory held on huge pages, transparent or hugetlbfs (not its files' text, which the
    reference's process may map on huge pages too)."""


_HUGE_FIELDS = ("AnonHugePages:", "ShmemPmdMapped:", "Shared_Hugetlb:", "Private_Hugetlb:")


def huge_pages(pid: int) -> HugePages:
    enabled: bool | None = None
    held: int | None = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("THP_enabled:"):
                enabled = line.split()[1] != "0"
    except (OSError, IndexError):
        pass
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(_HUGE_FIELDS):
                held = (held or 0) + int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return HugePages(enabled, held)
