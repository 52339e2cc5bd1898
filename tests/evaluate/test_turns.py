"""A timed window takes its CPU's turn (``evaluate/turns.py``): an evaluation in another
process holding the timing CPU is waited for before any timed call, whatever the kind of task,
and a turn on another CPU is not; a GPU round takes the GPU's turn (runner ``device_turn``), a
CPU round none. Real lock files held by a real second process with a ``TMPDIR`` of its own;
the waiting is read from the kernel's table of locks (``/proc/locks``), not from a clock. No
GPU is needed: a turn is a lock file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from maxcode.errors import MaxcodeError
from maxcode.harness import turns
from maxcode.harness.turns import timing_cpu
from maxcode.kinds.cpp.evaluate_cpp import evaluate_cpp
from maxcode.kinds.kernelbench.runner import device_turn
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import ECHO_SUM, write_problem, write_task

HOLDER = """
import sys
from pathlib import Path
from maxcode.harness import turns
from maxcode.kinds.kernelbench.runner import device_turn
turns.TURNS = Path(sys.argv[1])
with device_turn("cuda") if sys.argv[2] == "gpu" else turns.cpu_turn(int(sys.argv[2])):
    print("held", flush=True)
    sys.stdin.read()
"""

needs_two_cpus = pytest.mark.skipif(
    timing_cpu() is None, reason="timed runs are pinned only where a process has two CPUs"
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The turns' folder of this test alone (the suite's other worker takes the machine's)."""
    monkeypatch.setattr(turns, "TURNS", tmp_path / "turns")
    return turns.TURNS


@pytest.fixture
def holder(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int | str], subprocess.Popen[str]]]:
    """Start a process that holds a CPU's turn (or the GPU's: ``"gpu"``) until its stdin
    closes; its temporary folder is not this test's (the turns are the machine's)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    other = tmp_path / "holder-tmpdir"
    other.mkdir()
    started: list[subprocess.Popen[str]] = []

    def hold(which: int | str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder), str(which)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(other)},
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "held\n"
        return process

    yield hold
    for process in started:
        process.kill()
        process.wait()


def _waiters(path: Path) -> int:
    """Processes blocked on a lock of ``path`` right now (``->`` lines of ``/proc/locks``)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as table:
        return sum(1 for line in table if "->" in line and line.split()[-3].endswith(f":{inode}"))


def _await_waiter(lock: Path, seconds: float, running: Callable[[], bool] = lambda: True) -> int:
    """The processes blocked on ``lock`` once one is (or ``seconds`` passed, or ``running``
    says the one expected to block is gone)."""
    deadline = time.monotonic() + seconds
    while _waiters(lock) == 0 and running() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _waiters(lock)


def _waits_for_the_turn(
    folder: Path, cpu: int, holder: subprocess.Popen[str], evaluate: Callable[[], Feedback]
) -> Feedback:
    """Run ``evaluate`` in a thread while ``holder`` holds ``cpu``'s turn: it must block on
    the turn and not finish before the holder lets go; then it finishes."""
    done: list[Feedback] = []
    thread = threading.Thread(target=lambda: done.append(evaluate()), daemon=True)
    thread.start()
    lock = folder / f"cpu-{cpu}.lock"
    assert _await_waiter(lock, 240, thread.is_alive) == 1, "the evaluation never waited"
    assert not done
    assert holder.stdin is not None
    holder.stdin.close()  # the other evaluation's window ends
    thread.join(240)
    assert done, "the evaluation did not finish once the turn was free"
    return done[0]


def test_another_cpus_turn_is_not_waited_for(
    folder: Path, holder: Callable[[int | str], subprocess.Popen[str]]
) -> None:
    holder(0)
    entered = threading.Event()

    def enter(cpu: int) -> None:
        with turns.cpu_turn(cpu):
            entered.set()

    threading.Thread(target=enter, args=(1,), daemon=True).start()
    assert entered.wait(30)
    entered.clear()
    threading.Thread(target=enter, args=(0,), daemon=True).start()
    assert _await_waiter(folder / "cpu-0.lock", 30) == 1 and not entered.is_set()


@needs_two_cpus
def test_a_cpp_timed_window_waits_for_its_cpus_turn(
    tmp_path: Path, folder: Path, holder: Callable[[int | str], subprocess.Popen[str]]
) -> None:
    cpu = timing_cpu()
    assert cpu is not None
    task = load_task(str(write_task(tmp_path / "t")))
    feedback = _waits_for_the_turn(
        folder, cpu, holder(cpu), lambda: evaluate_cpp(task, ECHO_SUM, metric="wall", repeats=3)
    )
    assert feedback.correct and feedback.error is None
    assert feedback.tests_passed == feedback.tests_total == len(task.tests)


@needs_two_cpus
def test_a_kernelbench_timed_window_waits_for_its_cpus_turn(
    tmp_path: Path, folder: Path, holder: Callable[[int | str], subprocess.Popen[str]]
) -> None:
    pytest.importorskip("torch")
    from tests.evaluate.test_kernelbench_eval import judge, model_new

    cpu = timing_cpu()
    assert cpu is not None
    problem = write_problem(tmp_path, "return torch.relu(x)")
    feedback = _waits_for_the_turn(
        folder, cpu, holder(cpu), lambda: judge(model_new("return torch.relu(x)"), problem)
    )
    assert feedback.correct, feedback.error
    # The window opened once the turn was taken: the timed chunks are all there.
    assert feedback.kernelbench.timings["candidate"].trials > 0


def test_a_gpu_held_by_another_process_is_waited_for(
    folder: Path, holder: Callable[[int | str], subprocess.Popen[str]]
) -> None:
    process = holder("gpu")
    entered = {device: threading.Event() for device in ("cpu", "cuda")}

    def enter(device: str) -> None:
        with device_turn(device):
            entered[device].set()

    threading.Thread(target=enter, args=("cpu",), daemon=True).start()
    assert entered["cpu"].wait(30)  # a CPU round takes no GPU's turn
    threading.Thread(target=enter, args=("cuda",), daemon=True).start()
    assert _await_waiter(folder / "gpu-0.lock", 30) == 1 and not entered["cuda"].is_set()
    assert process.stdin is not None
    process.stdin.close()  # the other process lets go
    assert entered["cuda"].wait(30)


def test_a_turn_that_cannot_be_taken_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setattr(turns, "TURNS", blocked / "turns")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with (
        pytest.raises(MaxcodeError, match=r"cannot take the GPU's turn: .*gpu-0\.lock"),
        device_turn("cuda"),
    ):
        pass
