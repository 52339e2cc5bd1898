"""The parent's end of descriptor 3, driven over its real socket by two scripted workers that
speak the protocol (no torch in them): what the host stamps make of a chunk stamped late."""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import socket
import struct
import threading
import time
from typing import Any

import pytest

from maxcode.kinds.kernelbench.listener import Conversation
from maxcode.kinds.kernelbench.outputs import SEALS, Comparer
from maxcode.kinds.kernelbench.schedule import (
    Round,
    Stopping,
    TimedPlan,
)
from maxcode.kinds.kernelbench.worker.protocol import Phase, Side

LATE_S = 0.03
"""How long the scripted reference holds its first two identity chunks between their markers."""


def _memory_file(data: bytes, seal: bool = True) -> int:
    """A memory file holding ``data``, sealed as a worker seals its outputs."""
    fd = os.memfd_create("test-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    return fd


class _Ended(Exception):
    """The parent ended the conversation: the scripted worker stops."""


def _worker(fd: int, *args: Any, **options: Any) -> None:
    with contextlib.suppress(_Ended):
        _script(fd, *args, **options)


def _script(
    fd: int,
    phases: tuple[str, ...],
    late: set[tuple[str, int]],
    header: dict[str, object] | None = None,
    answers: list[object] | None = None,
    wrong: tuple[int, int] | None = None,
    checked: list[tuple[dict[str, object], bytes]] | None = None,
    output_values: int = 1,
    unsealed: bool = False,
    claim_s: float = 1e-6,
    hold_s: float = 0.0,
    ready_s: float = 0.0,
) -> None:
    """A worker that times nothing: every call reports 1 us and outputs ``output_values``
    float32s, all sent (timed calls) in one memory file per chunk (``unsealed``: not sealed).
    With ``header``, its first chunk's outputs are sent with that header and a pipe for a
    file, and it records every answer it gets after that in ``answers``, up to the end of the
    stream. ``wrong``: the (chunk, call) whose output is 2.0. ``checked``: per check seed, the
    message and the bytes of its one memory file, sent before the timed calls. ``claim_s``:
    the seconds it claims per call; ``hold_s``: what it spends between every chunk's markers;
    ``ready_s``: how long it takes to be ready."""
    with socket.socket(fileno=os.dup(fd)) as channel:
        stream = channel.makefile("rb")

        def send(message: dict[str, object], files: list[int] = ()) -> None:  # type: ignore[assignment]
            data = (json.dumps(message) + "\n").encode()
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", files).tobytes())]
            try:
                channel.sendmsg([data], rights if files else [])
            except OSError:
                raise _Ended from None  # the parent already closed its end
            for file in files:
                os.close(file)

        def answer() -> dict[str, object]:
            line = stream.readline()
            reply = json.loads(line) if line else {"refused": "closed"}
            if "refused" in reply:
                raise _Ended
            return reply

        size = 4 * output_values
        send({"m": "loaded"})
        answer()  # placed
        time.sleep(ready_s)
        send({"m": "ready", "estimate_s": 1e-6, "output_bytes": size, "input_bytes": 4})
        answer()  # the check seeds
        for message, data in checked or []:
            send(message, [_memory_file(data)])
        for phase in phases:
            chunk = 0
            while True:
                send({"m": "next", "phase": phase, "chunk": chunk})
                seeds = answer()["seeds"]
                assert isinstance(seeds, list)
                if not seeds:
                    break
                send({"m": "begin", "phase": phase, "chunk": chunk})
                assert answer() == {"go": True}
                if (phase, chunk) in late:
                    time.sleep(LATE_S)
                if phase == "K":
                    time.sleep(hold_s)
                times = [claim_s] * len(seeds)
                send({"m": "end", "phase": phase, "chunk": chunk, "times": times})
                assert answer() == {"send": True}
                sent = range(len(seeds)) if phase == "K" else range(0)
                items = [
                    {
                        "position": position,
                        "tensors": [
                            header
                            or {
                                "dtype": "float32",
                                "shape": [output_values],
                                "nbytes": size,
                                "at": position * -(-size // 64) * 64,
                            }
                        ],
                    }
                    for position in sent
                ]
                message = {"m": "outputs", "phase": phase, "chunk": chunk, "items": items}
                if header and sent:
                    reading, writing = os.pipe()
                    os.close(writing)
                    send({**message, "files": 1}, [reading])
                    assert answers is not None
                    answers.extend(json.loads(line) for line in iter(stream.readline, b""))
                    return
                data = b"".join(
                    struct.pack("f", 2.0 if (chunk, call) == wrong else 1.0) * output_values
                    + bytes(-size % 64)
                    for call in sent
                )
                files = [_memory_file(data, seal=not unsealed)] if sent else []
                send({**message, "files": len(files)}, files)
                chunk += 1


def _converse(
    schedule: Round,
    reference: dict[str, object] | None = None,
    candidate: dict[str, object] | None = None,
) -> tuple[Conversation, Conversation]:
    """Both sides' conversations, each served to its end by a scripted worker (``_worker``'s
    keyword options per side), then closed."""
    sides = (
        Conversation(schedule, Side.REFERENCE, [1, 2, 3], (Phase.PAIRS, Phase.IDENTITY)),
        Conversation(schedule, Side.CANDIDATE, [1, 2, 3], (Phase.PAIRS,)),
    )
    workers = [
        threading.Thread(
            target=_worker,
            args=(side.worker_fd, side.phases),
            kwargs={"late": set(), **(options or {})},
        )
        for side, options in zip(sides, (reference, candidate))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    for side in sides:
        side.close()
    return sides


def test_the_harness_cost_is_the_least_identity_chunk_not_one_the_parent_stamped_late() -> None:
    # With a core kept busy, the parent's serving thread can stamp a chunk's end late. Identity
    # chunks are a few microseconds of calls, so two late ones out of four made the median
    # per-call cost larger than a clock-patching candidate's whole window, which netted it to
    # nothing and hid the lie from the marker check (1 fresh-clone run, 3 of 30 repeats).
    late = {("O", 0), ("O", 1)}
    schedule = Round(TimedPlan(), Stopping(trials=8))
    reference, candidate = _converse(schedule, reference={"late": late})
    assert reference.problem is None and candidate.problem is None
    assert reference.measured("O").complete and len(reference.measured("O").chunk_times) == 4
    calls = len(reference.measured("O").chunk_times[0])
    # Half the identity chunks were held LATE_S between their markers: the median says so, the
    # least does not.
    median, least = reference.measured("O").per_call(), reference.measured("O").least_per_call()
    assert median is not None and least is not None
    assert median >= LATE_S / calls / 2 - 1e-9
    assert least < LATE_S / calls / 2


def test_on_a_gpu_the_reward_is_the_parent_s_clock_not_the_claims() -> None:
    # A candidate that patches its CUDA events claims what it likes; the parent's stamps
    # around each chunk (the worker waits for the whole device before its end marker) are
    # what the reward counts. Here both sides spend the same 5 ms a chunk; the candidate
    # claims half the reference's time per call.
    torch = pytest.importorskip("torch")
    from maxcode.harness.sandbox import Sandbox
    from maxcode.kinds.kernelbench.judge import Judge
    from maxcode.kinds.kernelbench.parameters import KernelBenchSettings
    from maxcode.kinds.load import load_task
    from tests.helpers import REPO

    schedule = Round(TimedPlan(), Stopping(trials=16))
    reference, candidate = _converse(
        schedule,
        reference={"claim_s": 2e-4, "hold_s": 0.005},
        candidate={"claim_s": 1e-4, "hold_s": 0.005},
    )
    assert reference.problem is None and candidate.problem is None
    task = load_task(str(REPO / "tests" / "fixtures" / "kernelbench" / "cheats" / "problem.py"))
    sides = [type("Side", (), {"conversation": side})() for side in (reference, candidate)]
    for device in ("cuda", "cpu"):
        settings = KernelBenchSettings(device=device)
        judge = Judge.start(torch, task, settings, "digest", Sandbox(), schedule)
        estimate = judge._paired(*sides)  # type: ignore[arg-type]
        # On a CPU the scripted workers have no CPU clock to read: the claims (exactly 2x)
        # stand there (the window check voids that, ``_host_check``); on a GPU the stamps
        # decide, and the claims are said to give more than they do.
        said = [flag for flag in judge.verdict.flags if flag.startswith("clock:")]
        assert bool(said) == (device == "cuda"), judge.verdict.flags
        assert (estimate.speedup == pytest.approx(2.0)) == (device == "cpu"), estimate


def test_an_error_of_any_kind_in_a_worker_s_message_ends_its_conversation_at_once() -> None:
    # torch raised TypeError on this header; the serving thread caught only ValueError and
    # OSError, so it died without a word and the worker waited on its descriptor until the
    # candidate's time limit (an evaluation seen stuck for over 10 minutes).
    schedule = Round(TimedPlan(), Stopping(trials=8))
    reference = Conversation(schedule, Side.REFERENCE, [1, 2, 3], (Phase.PAIRS, Phase.IDENTITY))
    candidate = Conversation(schedule, Side.CANDIDATE, [1, 2, 3], (Phase.PAIRS,))
    # The header validates, but the file sent with it is a pipe, not a sealed memory file.
    unshapeable: dict[str, object] = {"dtype": "float32", "shape": [1], "nbytes": 4, "at": 0}
    answers: list[object] = []
    workers = [
        threading.Thread(
            target=_worker, args=(reference.worker_fd, (Phase.PAIRS, Phase.IDENTITY), set())
        ),
        threading.Thread(
            target=_worker, args=(candidate.worker_fd, (Phase.PAIRS,), set(), unshapeable, answers)
        ),
    ]
    for worker in workers:
        worker.start()
    workers[1].join(timeout=30)
    assert not workers[1].is_alive(), "the candidate's worker was left waiting"
    workers[0].join(timeout=30)
    reference.close()
    candidate.close()
    assert candidate.problem is not None and "broke the protocol" in candidate.problem
    assert len(answers) == 1 and isinstance(answers[0], dict) and "refused" in answers[0]
    # The other side is not held up by the broken one.
    assert reference.problem is None and not workers[0].is_alive()


def test_kept_outputs_are_compared_between_chunks_and_no_output_byte_crosses_the_socket() -> None:
    # Held to the judgement, each kept output took memory of its own in the parent (1.3 GB
    # for the scaled level1/21_Sigmoid). Now they stay in the workers' sealed memory files,
    # compared as soon as both sides' are in: the socket carries headers only.
    torch = pytest.importorskip("torch")
    schedule = Round(TimedPlan(), Stopping(trials=8))
    schedule.kept.compare_with(Comparer(torch))
    compared_before: list[int] = []
    original = schedule.kept.settle

    def settle() -> None:  # what was compared by the time each settlement ran
        original()
        compared_before.append(len(schedule.kept.problems))

    schedule.kept.settle = settle  # type: ignore[method-assign]
    values = 1 << 18  # 1 MiB of outputs a call
    reference, candidate = _converse(
        schedule,
        reference={"output_values": values},
        candidate={"wrong": (5, 0), "output_values": values},
    )
    assert reference.problem is None and candidate.problem is None
    assert schedule.plan.chunks == [1] * 8 and schedule.plan.positions() == list(range(8))
    # Pair n is compared when the reference asks for chunk n + 1 (its last request included),
    # with nothing held after it.
    assert compared_before == list(range(9))
    assert schedule.kept.held(True) == 0 and schedule.kept.held(False) == 0
    problems = schedule.kept.problems
    assert [position for position, problem in problems.items() if problem] == [5]
    assert "outside tolerance" in str(problems[5])
    # 8 MiB of outputs per side went to the parent; a few kB of messages crossed the socket.
    for side in (reference, candidate):
        assert side.received_bytes < 32 << 10, side.received_bytes


def test_an_output_file_the_worker_did_not_seal_is_refused() -> None:
    # Unsealed, the worker (or anything the candidate left running) could change an output
    # while the parent reads it.
    pytest.importorskip("torch")
    schedule = Round(TimedPlan(), Stopping(trials=8))
    reference, candidate = _converse(schedule, candidate={"unsealed": True})
    assert reference.problem is None
    assert candidate.problem is not None and "not sealed" in candidate.problem


def test_a_sealed_output_file_cannot_be_written_by_anyone() -> None:
    # What the parent relies on: once sealed, no descriptor and no mapping writes the file,
    # and a writable shared mapping left open makes the seal itself fail.
    import mmap

    fd = _memory_file(b"\x00" * 4096)
    try:
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\x01", 0)
        with pytest.raises(PermissionError):
            mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
        with pytest.raises(PermissionError):  # F_SEAL_SEAL: the seals stay
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    finally:
        os.close(fd)
    fd = _memory_file(b"\x00" * 4096, seal=False)
    try:
        mapped = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
        with pytest.raises(OSError):  # EBUSY: a writer still maps it
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        mapped.close()
    finally:
        os.close(fd)


def _checked(seed: int, values: dict[str, float]) -> tuple[dict[str, object], bytes]:
    """One check seed's message (one float32 per key given) and its file's bytes."""
    items = [
        {
            "key": key,
            "seed": seed,
            "tensors": [{"dtype": "float32", "shape": [1], "nbytes": 4, "at": 64 * number}],
        }
        for number, key in enumerate(values)
    ]
    data = b"".join(struct.pack("f", value) + bytes(60) for value in values.values())
    return {"m": "checked", "seed": seed, "items": items, "files": 1}, data


def _run_checked(
    checked: list[tuple[dict[str, object], bytes]],
) -> tuple[Round, Conversation]:
    # The reference is ready late: the candidate's check seeds wait for its sizes, so its
    # checked tensors are always held to them.
    schedule = Round(TimedPlan(), Stopping(trials=4))
    _, candidate = _converse(schedule, reference={"ready_s": 0.2}, candidate={"checked": checked})
    return schedule, candidate


def test_checked_tensors_come_once_per_seed_in_order_one_of_each_key() -> None:
    torch = pytest.importorskip("torch")
    keys = {"check": 1.0, "again": 1.0, "after": 0.5}
    whole = [_checked(seed, keys) for seed in range(3)]
    schedule, candidate = _run_checked(whole)
    assert candidate.problem is None and candidate.checked
    held = schedule.checked._held[False]
    window = held[2].values["after"][0].window(0, 1)
    assert float(window[0]) == 0.5 and window.dtype == torch.float32
    schedule.checked.close()
    _, candidate = _run_checked(whole[:1] + whole[2:])
    assert candidate.problem is not None and "out of order" in candidate.problem
    _, candidate = _run_checked([_checked(0, {"check": 1.0, "again": 1.0})])
    assert candidate.problem is not None and "one of each key" in candidate.problem
    message, data = _checked(0, keys)
    message["items"][0]["tensors"] = [  # type: ignore[index]
        {"dtype": "float32", "shape": [1 << 20], "nbytes": 4 << 20, "at": 0}
    ]
    _, candidate = _run_checked([(message, data)])
    assert candidate.problem is not None and "more checked bytes" in candidate.problem
    message, data = _checked(0, keys)
    message["items"][0]["tensors"] = [  # type: ignore[index]
        {"dtype": "float32", "shape": [4], "nbytes": 16, "at": 4096}
    ]
    _, candidate = _run_checked([(message, data)])
    assert candidate.problem is not None and "beyond the end" in candidate.problem
