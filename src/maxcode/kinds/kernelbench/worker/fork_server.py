"""A side's zygote: one process for a whole evaluation that imports torch once and forks the
side's worker for each round, then kills whatever the round left."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import suppress
from typing import Any

from .layout import call_libc, layout_draw, shift_layout
from .main import main
from .protocol import CHANNEL_FD

_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36


def serve() -> int:
    """Import torch once, then fork this side's worker for each round ordered on descriptor 3
    (JSON on a ``SOCK_SEQPACKET`` socket, the round's conversation attached), answering once the
    round's processes are gone. No code of the task runs here, and the workers cannot reach it:
    not dumpable, their subreaper (whatever a round leaves is killed before the next)."""
    import signal
    import socket

    import torch  # noqa: F401  (what every round's worker imports: once, here)

    call_libc("prctl", _PR_SET_DUMPABLE, 0, 0, 0, 0)
    call_libc("prctl", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    control = socket.socket(fileno=CHANNEL_FD)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            return 0
        if not message:
            return 0
        answer = _serve_round(json.loads(message), fds, control)
        control.send(json.dumps(answer).encode())


def _serve_round(order: dict[str, Any], fds: list[int], control: Any) -> dict[str, Any]:
    """Fork the round's worker, wait for it (killed at ``wall_s``), kill what it left, and say
    how it ended (read by ``sandbox.reported_result``)."""
    import resource
    import signal

    if len(fds) != 1:
        return {"problem": "no conversation socket came with the round"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        _forked_worker(order, fds[0], control)
    os.close(fds[0])
    expired = []

    def expire(signum: int, frame: Any) -> None:
        expired.append(True)
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(float(order["wall_s"]), 0.001))
    _, status, usage = os.wait4(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    wall_ns = time.monotonic_ns() - started
    stragglers = _sweep()
    _clear_private_tmp()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "status": status,
        "timed_out": bool(expired),
        "wall_ns": wall_ns,
        "cpu_us": int(cpu * 1e6),
        "maxrss_kb": usage.ru_maxrss,
        "stragglers": stragglers,
    }


def _forked_worker(order: dict[str, Any], conversation: int, control: Any) -> None:
    """The round's worker in the fork: its conversation as descriptor 3, a folder of its own,
    the round's layout shift; then ``main`` (on the zygote's CPU until the parent moves it
    to the timing CPU for its timed chunks)."""
    try:
        import resource
        import signal

        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        control.detach()  # descriptor 3: the conversation replaces it
        os.dup2(conversation, CHANNEL_FD)
        os.close(conversation)
        call_libc("prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0)
        cpu_s = int(order["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        os.mkdir(order["folder"], 0o755)
        os.chdir(order["folder"])
        for fd, name in ((1, "stdout"), (2, "stderr")):
            opened = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.environ["MAXCODE_LAYOUT_SEED"] = str(int(order["layout"]))
        _, pages, heap = layout_draw()
        shift_layout(pages, heap)
        main(order["spec"])
    except BaseException:
        traceback.print_exc()
    os._exit(70)


def _sweep() -> bool:
    """Kill and reap every child (as the subreaper, every orphan of a round); whether any."""
    import signal

    killed = False
    while True:
        children = _children_of(os.getpid())
        if not children:
            break
        killed = True
        for pid in children:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
    while True:  # zombies no listing showed
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return killed


def _clear_private_tmp() -> None:
    """Delete what a round left in the run's private ``/tmp`` (the sandbox's tmpfs named
    ``maxcode``, shared by the zygote's rounds), never across a folder mounted inside it."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split(" - ", 1) for line in handle]
    except OSError:
        return
    for fields, rest in (pair for pair in mounts if len(pair) == 2):
        target, source = fields.split()[4], rest.split()[1:2]
        if target in ("/tmp", "/var/tmp") and source == ["maxcode"]:
            with suppress(OSError, RecursionError):
                _clear_folder(target, os.lstat(target).st_dev)


def _clear_folder(folder: str, device: int) -> None:
    import stat

    for entry in os.scandir(folder):
        try:
            info = os.lstat(entry.path)
        except OSError:
            continue
        if info.st_dev != device:
            continue  # a folder the sandbox mounted here
        with suppress(OSError):  # a folder fails on the way to a mounted one
            if stat.S_ISDIR(info.st_mode):
                os.chmod(entry.path, 0o700)
                _clear_folder(entry.path, device)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)


def _children_of(parent: int) -> list[int]:
    """Live children of ``parent``, from ``/proc``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent and fields[0] != b"Z":
            found.append(int(entry))
    return found
