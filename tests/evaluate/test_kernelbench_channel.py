"""The parent's end of descriptor 3, driven over its real socket by two scripted workers that
speak the protocol (no torch in them): what the host stamps make of a chunk stamped late."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import pytest

from maxcode.evaluate.kernelbench.channel import Conversation, WarmMemory
from maxcode.evaluate.kernelbench.outputs import Comparison
from maxcode.evaluate.kernelbench.schedule import (
    CANDIDATE,
    REFERENCE,
    Schedule,
    Stopping,
    TimedPlan,
)

LATE_S = 0.03
"""How long the scripted reference holds its first two identity chunks between their markers."""


def _worker(
    fd: int,
    phases: tuple[str, ...],
    late: set[tuple[str, int]],
    header: dict[str, object] | None = None,
    answers: list[object] | None = None,
    wrong: tuple[int, int] | None = None,
    checked: tuple[list[dict[str, object]], bytes] | None = None,
) -> None:
    """A worker that times nothing: every call reports 1 us and outputs one float32, all sent
    (timed calls). With ``header``, its first chunk's outputs are sent with that header and no
    bytes, and it records every answer it gets after that in ``answers``, up to the end of the
    stream. ``wrong``: the (chunk, call) whose output is 2.0. ``checked``: the items and bytes
    of the checked tensors, sent last."""
    with socket.socket(fileno=os.dup(fd)) as channel:
        stream = channel.makefile("rb")

        def send(message: dict[str, object], payload: bytes = b"") -> None:
            channel.sendall((json.dumps(message) + "\n").encode() + payload)

        def answer() -> dict[str, object]:
            return json.loads(stream.readline())

        send({"m": "ready", "estimate_s": 1e-6, "output_bytes": 4, "input_bytes": 4})
        answer()  # the check seeds
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
                send({"m": "end", "phase": phase, "chunk": chunk, "times": [1e-6] * len(seeds)})
                assert answer() == {"send": True}
                sent = range(len(seeds)) if phase == "K" else range(0)
                tensor = header or {"dtype": "float32", "shape": [1], "nbytes": 4}
                items = [{"position": position, "tensors": [tensor]} for position in sent]
                send(
                    {"m": "outputs", "phase": phase, "chunk": chunk, "items": items},
                    b""
                    if header
                    else b"".join(
                        struct.pack("f", 2.0 if (chunk, call) == wrong else 1.0) for call in sent
                    ),
                )
                if header and sent:
                    assert answers is not None
                    answers.extend(json.loads(line) for line in iter(stream.readline, b""))
                    return
                chunk += 1
        if checked is not None:
            send({"m": "checked", "items": checked[0]}, checked[1])


def _converse(
    schedule: Schedule,
    reference: dict[str, object] | None = None,
    candidate: dict[str, object] | None = None,
) -> tuple[Conversation, Conversation]:
    """Both sides' conversations, each served to its end by a scripted worker (``_worker``'s
    keyword options per side), then closed."""
    sides = (
        Conversation(schedule, REFERENCE, [1, 2, 3], ("K", "O")),
        Conversation(schedule, CANDIDATE, [1, 2, 3], ("K",)),
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
    schedule = Schedule(TimedPlan(), Stopping(trials=8))
    reference, candidate = _converse(schedule, reference={"late": late})
    assert reference.problem is None and candidate.problem is None
    assert reference.complete("O") and len(reference.chunk_times("O")) == 4
    calls = len(reference.chunk_times("O")[0])
    # Half the identity chunks were held LATE_S between their markers: the median says so, the
    # least does not.
    median, least = reference.per_call("O"), reference.least_per_call("O")
    assert median is not None and least is not None
    assert median >= LATE_S / calls / 2 - 1e-9
    assert least < LATE_S / calls / 2


def test_an_error_of_any_kind_in_a_worker_s_message_ends_its_conversation_at_once() -> None:
    # torch raised TypeError on this header; the serving thread caught only ValueError and
    # OSError, so it died without a word and the worker waited on its descriptor until the
    # candidate's time limit (an evaluation seen stuck for over 10 minutes).
    schedule = Schedule(TimedPlan(), Stopping(trials=8))
    reference = Conversation(schedule, REFERENCE, [1, 2, 3], ("K", "O"))
    candidate = Conversation(schedule, CANDIDATE, [1, 2, 3], ("K",))
    # Sizes of at least 0 and 0 bytes: the header validates, but torch cannot shape it.
    unshapeable: dict[str, object] = {"dtype": "float32", "shape": [0, 10**30], "nbytes": 0}
    answers: list[object] = []
    workers = [
        threading.Thread(target=_worker, args=(reference.worker_fd, ("K", "O"), set())),
        threading.Thread(
            target=_worker, args=(candidate.worker_fd, ("K",), set(), unshapeable, answers)
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


def test_kept_outputs_are_compared_between_chunks_and_land_in_the_same_memory() -> None:
    # Held to the judgement, each kept output landed in memory of its own: the scaled
    # level1/21_Sigmoid (64 MB outputs) spent 130-220 ms per chunk touching it, and the parent
    # held 1.3 GB. Compared as soon as both sides' are in, one landing per side serves all.
    torch = pytest.importorskip("torch")
    schedule = Schedule(TimedPlan(), Stopping(trials=8))
    schedule.kept.compare_with(Comparison(torch))
    compared_before: list[int] = []
    original = schedule.kept.settle

    def settle() -> None:  # what was compared by the time each settlement ran
        original()
        compared_before.append(len(schedule.kept.problems))

    schedule.kept.settle = settle  # type: ignore[method-assign]
    reference, candidate = _converse(schedule, candidate={"wrong": (5, 0)})
    assert reference.problem is None and candidate.problem is None
    assert schedule.plan.chunks == [1] * 8 and schedule.plan.positions() == list(range(8))
    # Pair n is compared when the reference asks for chunk n + 1 (its last request included),
    # with nothing held after it.
    assert compared_before == list(range(9))
    assert schedule.kept.held(True) == 0 and schedule.kept.held(False) == 0
    problems = schedule.kept.problems
    assert [position for position, problem in problems.items() if problem] == [5]
    assert "outside tolerance" in str(problems[5])
    for side in (reference, candidate):
        chunks = [chunk for (phase, _), chunk in side.chunks.items() if phase == "K"]
        landed = {chunk.landing.untyped_storage().data_ptr() for chunk in chunks}
        assert len(chunks) == 8 and len(landed) == 1, landed


def _checked(values: dict[tuple[str, int], float]) -> tuple[list[dict[str, object]], bytes]:
    """Checked tensors of one float32 each, for the (key, seed)s given."""
    header = {"dtype": "float32", "shape": [1], "nbytes": 4}
    items = [{"key": key, "seed": seed, "tensors": [header]} for key, seed in values]
    return items, b"".join(struct.pack("f", value) for value in values.values())


def _run_checked(
    checked: tuple[list[dict[str, object]], bytes],
) -> tuple[Conversation, Conversation]:
    return _converse(Schedule(TimedPlan(), Stopping(trials=4)), candidate={"checked": checked})


def test_checked_tensors_come_once_one_of_each_key_and_seed() -> None:
    # They went through a file (tensors.pt) until 2026-11-26: written, then read back into
    # fresh memory, 3-4 s a round for 600 MB a side on this project's VM.
    pytest.importorskip("torch")
    keys = [(key, seed) for key in ("check", "again", "after") for seed in range(3)]
    whole = {key: float(number) for number, key in enumerate(keys)}
    _, candidate = _run_checked(_checked(whole))
    assert candidate.problem is None and candidate.checked is not None
    assert [float(seed[0][0]) for seed in candidate.checked["again"]] == [3, 4, 5]
    candidate.release()
    assert candidate.checked is None
    missing = dict(list(whole.items())[:-1])
    _, candidate = _run_checked(_checked(missing))
    assert candidate.problem is not None and "one of each key and seed" in candidate.problem
    assert candidate.checked is None
    items, payload = _checked(whole)
    items[0]["tensors"] = [{"dtype": "float32", "shape": [1 << 20], "nbytes": 4 << 20}]
    _, candidate = _run_checked((items, payload))
    assert candidate.problem is not None and "more checked bytes" in candidate.problem


def test_warm_memory_hands_out_what_was_given_back_smallest_first() -> None:
    pytest.importorskip("torch")
    memory = WarmMemory()
    big, small = memory.take(4096), memory.take(1024)
    assert big.numel() == 4096 and int(big.sum()) == 0  # fresh memory is touched (zeros)
    memory.give(big)
    memory.give(small)
    again = memory.take(1000)
    assert again.data_ptr() == small.data_ptr()
    assert memory.take(2000).data_ptr() == big.data_ptr()
    assert memory.take(10).data_ptr() not in (big.data_ptr(), small.data_ptr())
