"""``--device auto``, the default: a KernelBench task runs on the GPU when PyTorch sees one,
else on the CPU, and the user is told which; C++ and project tasks run on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxcode.errors import MaxcodeError
from maxcode.kinds import KINDS
from maxcode.kinds.kernelbench.backends import device_note, resolve_device
from tests.helpers import run_maxcode, write_problem


def test_auto_is_the_gpu_only_for_kernelbench_and_only_when_torch_sees_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert KINDS["kernelbench"].device("auto") == "cuda"
    assert KINDS["cpp"].device("auto") == "cpu" and KINDS["project"].device("auto") == "cpu"
    for name in ("cpp", "project"):
        with pytest.raises(MaxcodeError, match="tasks run on the CPU"):
            KINDS[name].device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert "no GPU" in device_note("cpu") and "sees a GPU" in device_note("cuda")


def test_eval_says_which_device_auto_chose(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    problem = write_problem(tmp_path, "return torch.relu(x)")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    done = run_maxcode(
        "eval",
        str(problem),
        str(candidate),
        "--json",
        "--rounds",
        "1",
        "--repeats",
        "10",
        "--no-compile-baseline",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    expected = resolve_device("auto")
    assert result["device"] == expected and result["correct"]
    assert device_note(expected) in done.stderr
