"""Who drives a run: the lease a driving process holds in the store (process id, host, the
process's start time, a heartbeat), and whether its holder is still alive."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

LEASE_STALE_S = 120.0
"""A lease held from another host is dead once its heartbeat is this old."""
HEARTBEAT_S = 10.0
"""How often a driver renews its lease."""


def this_host() -> str:
    """The host name a lease records."""
    return socket.gethostname()


def process_start(pid: int) -> str:
    """The kernel's start time of process ``pid`` (empty: unknown, or no such process), so that
    a process id reused by another program is not taken for the driver."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    # After the command name: state is field 3, starttime field 22 (1-based).
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return ""
    return fields[19]


@dataclass(frozen=True)
class Lease:
    """The process that drives (or drove) a run."""

    pid: int
    """Its process id."""
    host: str
    """The host it runs on."""
    process_start: str
    """Its start time as the kernel counts it (empty: unknown)."""
    heartbeat_at: float
    """Unix time it last said it was alive."""

    def alive(self) -> bool:
        """The holder still runs: on this host, its process exists with the same start time;
        on another host, its heartbeat is recent."""
        if self.host != this_host():
            return time.time() - self.heartbeat_at < LEASE_STALE_S
        if self.process_start:
            return process_start(self.pid) == self.process_start
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def mine(self) -> bool:
        """This process holds it."""
        return self.host == this_host() and self.pid == os.getpid()

    def describe(self) -> str:
        """``process 1234 on HOST``."""
        return f"process {self.pid} on {self.host}"
