"""A GPU is taken in turn by evaluations of separate processes (runner ``device_turn``); a
CPU evaluation takes no such turn. No GPU is needed: the turn is a lock file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from maxcode.errors import MaxcodeError
from maxcode.evaluate import turns
from maxcode.evaluate.kernelbench.runner import device_turn

HOLDER = """
import sys
from pathlib import Path
from maxcode.evaluate import turns
from maxcode.evaluate.kernelbench.runner import device_turn
turns.TURNS = Path(sys.argv[1])
with device_turn("cuda"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _entered(device: str) -> threading.Event:
    entered = threading.Event()

    def enter() -> None:
        with device_turn(device):
            entered.set()

    threading.Thread(target=enter, daemon=True).start()
    return entered


def test_a_gpu_held_by_another_process_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "turns"
    monkeypatch.setattr(turns, "TURNS", folder)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    other = tmp_path / "another-tmpdir"  # the other process's temporary folder is its own
    other.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(other)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert _entered("cpu").wait(30)  # a CPU evaluation takes no turn
        waiting = _entered("cuda")
        assert not waiting.wait(0.5)  # cannot enter while the other process holds it
        assert holder.stdin is not None
        holder.stdin.close()  # the other process lets go
        assert waiting.wait(30)
    finally:
        holder.kill()
        holder.wait()
    assert (folder / "gpu-0.lock").exists()


def test_a_turn_that_cannot_be_taken_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setattr(turns, "TURNS", blocked / "turns")
    with (
        pytest.raises(MaxcodeError, match=r"cannot take the GPU's turn: .*gpu-0\.lock"),
        device_turn("cuda"),
    ):
        pass
