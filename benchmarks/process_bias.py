"""Process bias, fresh processes against forks: does a forked child draw it afresh?

A KernelBench round pairs two worker processes on one CPU; their ratio carries a bias that
lasts each process's life, which only fresh processes sample (``rounds.py``). Starting them
costs two imports of torch a round. A fork server (a process that imported torch once and
forks a worker per round) would be cheap, but only useful if its children draw the bias anew.

This measures it outside the harness, the way the harness pairs: per round two processes,
pinned to one CPU with address randomization off, alternate chunks of ``--calls`` identical
element-wise calls (``1_ScaledGELU``'s, inputs made before each chunk and copied to a page
drawn per call), ``--pairs`` pairs; a round's ratio is the mean of the pairs' log ratios
(the first two left out). Rounds alternate between two fresh interpreters and two children
forked from two long-lived zygotes, one per side (a forked round's ratio is always the first
zygote's child over the second's: a bias a zygote hands to all its children would show as
ratios on one side of 1.0). Printed: each round's ratio with its 95% half-width, then per
kind the spread of the rounds' ratios (standard deviation of the log).

    python benchmarks/process_bias.py [--rounds 12] [--pairs 60] [--calls 6] [--cpu N]

It lacks the harness's heap reserve and shared layout draw, so its bias is larger than the
harness's; it compares the two kinds of process, not the harness.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from maxcode.kinds.kernelbench import runner
from maxcode.kinds.kernelbench.worker import layout, timing

_SETTINGS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MALLOC_MMAP_MAX_",
    "MALLOC_TRIM_THRESHOLD_",
    "THP_MEM_ALLOC_ENABLE",
)
ENVIRONMENT = {
    name: value for name, value in runner._environment(Path(), Path()).items() if name in _SETTINGS
}
"""The workers' thread and allocation settings, as the harness sets them."""
_PAGE = timing.PAGE
_SPAN = 16 << 20


def _shift(seed: int) -> None:
    """The worker's layout shift for ``seed`` (worker ``layout.layout_draw``, ``shift_layout``)."""
    os.environ["MAXCODE_LAYOUT_SEED"] = str(seed)
    _, pages, heap = layout.layout_draw()
    layout.shift_layout(pages, heap)


def _serve(torch: Any, address: str, seed: int, calls: int) -> None:
    """One side of a round: connect, warm up, then time a chunk per seed received."""
    _shift(seed)
    torch.set_num_threads(1)

    def model(x: Any) -> Any:
        return x * torch.sigmoid(1.702 * x) * 1.5 + 0.25

    connection = socket.socket(socket.AF_UNIX)
    connection.connect(address)
    channel = connection.makefile("rw")
    for number in range(3):
        torch.manual_seed(number)
        model(torch.randn(256, 4096))
    channel.write(f"ready {os.getppid()}\n")
    channel.flush()
    for line in channel:
        if line.strip() == "stop":
            break
        chunk = int(line)
        placed = []
        for call in range(calls):
            torch.manual_seed(chunk + call)
            value = torch.randn(256, 4096)
            size = value.numel() * value.element_size()
            offset = _PAGE * ((chunk * 7919 + call * 104729) % (_SPAN // _PAGE))
            room = torch.empty(size + _SPAN, dtype=torch.uint8)
            moved = room[offset : offset + size].view(value.dtype).view(value.shape)
            moved.copy_(value)
            placed.append((room, moved))
        times = []
        for _, given in placed:
            started = time.perf_counter()
            output = model(given)
            times.append(time.perf_counter() - started)
            del output
        del placed
        channel.write(json.dumps(times) + "\n")
        channel.flush()
    os._exit(0)


def _fresh(address: str, seed: int, calls: int) -> None:
    layout.no_huge_pages()
    import torch

    _serve(torch, address, seed, calls)


def _zygote(address: str, calls: int) -> None:
    """Imports torch once; forks a side for every seed read on stdin."""
    layout.no_huge_pages()
    import torch

    for line in sys.stdin:
        if os.fork() == 0:
            _serve(torch, address, int(line), calls)
        os.waitpid(-1, os.WNOHANG)


def _round(
    listener: socket.socket, starts: list[Callable[[], None]], order: list[int] | None, pairs: int
) -> tuple[float, float]:
    """The log ratio of one round's two sides and its standard error."""
    for start in starts:
        start()
    tagged = []
    for _ in starts:
        connection, _ = listener.accept()
        channel = connection.makefile("rw")
        parent = int(channel.readline().split()[1])
        tagged.append((parent, channel))
    if order is not None:
        tagged.sort(key=lambda item: order.index(item[0]))
    channels = [channel for _, channel in tagged]
    logs = []
    for pair in range(pairs):
        chunk = random.randrange(2**40)
        medians = []
        for channel in channels:
            channel.write(f"{chunk}\n")
            channel.flush()
            medians.append(statistics.median(json.loads(channel.readline())))
        if pair >= 2:
            logs.append(math.log(medians[0] / medians[1]))
    for channel in channels:
        channel.write("stop\n")
        channel.flush()
    return statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds of each kind")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--calls", type=int, default=6, help="calls per chunk")
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    options = parser.parse_args()
    environment = {**os.environ, **ENVIRONMENT}
    here = [sys.executable, __file__]
    pinned = ["taskset", "-c", str(options.cpu), "setarch", "x86_64", "-R", *here]
    with tempfile.TemporaryDirectory(prefix="maxcode-bias-") as folder:
        address = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(address)
        listener.listen(4)
        role = [address, str(options.calls)]
        zygotes = [
            subprocess.Popen(
                [*pinned, "zygote", *role], stdin=subprocess.PIPE, text=True, env=environment
            )
            for _ in range(2)
        ]
        spawned: list[subprocess.Popen[bytes]] = []
        ratios: dict[str, list[float]] = {"fresh": [], "forked": []}
        try:
            for number in range(options.rounds):
                seed = random.randrange(2**41)

                def fresh(seed: int = seed) -> None:
                    spawned.append(
                        subprocess.Popen([*pinned, "fresh", *role, str(seed)], env=environment)
                    )

                def forked(zygote: subprocess.Popen[str], seed: int = seed) -> Callable[[], None]:
                    def start() -> None:
                        assert zygote.stdin is not None
                        zygote.stdin.write(f"{seed}\n")
                        zygote.stdin.flush()

                    return start

                kinds = {
                    "fresh": ([fresh, fresh], None),
                    "forked": ([forked(zygote) for zygote in zygotes], [z.pid for z in zygotes]),
                }
                for kind, (starts, order) in kinds.items():
                    centre, error = _round(listener, starts, order, options.pairs)
                    ratios[kind].append(centre)
                    print(
                        f"round {number + 1:>2} {kind:<6} {math.exp(centre):.4f} "
                        f"+-{196 * error:.2f}%",
                        flush=True,
                    )
        finally:
            for zygote in zygotes:
                if zygote.stdin is not None:
                    zygote.stdin.close()
                zygote.wait()
            for process in spawned:
                process.wait()
    for kind, logs in ratios.items():
        print(
            f"{kind:<6} rounds' sd {100 * statistics.stdev(logs):.2f}% (log), "
            f"mean {math.exp(statistics.fmean(logs)):.4f}, "
            f"{math.exp(min(logs)):.3f}-{math.exp(max(logs)):.3f}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fresh":
        _fresh(sys.argv[2], int(sys.argv[4]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "zygote":
        _zygote(sys.argv[2], int(sys.argv[3]))
    else:
        main()
