"""KernelBench problem files: loaded and checked without running them; suites; shape scaling."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxcode.errors import TaskError
from maxcode.kinds.kernelbench.problem import kernelbench_suite, scaled_constants
from maxcode.kinds.load import load_task
from tests.helpers import run_maxcode

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''


def _write(folder: Path, name: str, text: str = PROBLEM) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_a_problem_file_loads_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = PROBLEM + f"\nopen({str(marker)!r}, 'w').write('x')\n"
    task = load_task(str(_write(tmp_path, "19_ReLU.py", text)))
    assert not marker.exists()
    assert task.kind == "kernelbench" and task.name == "19_ReLU"
    assert task.description == "Simple model that performs a ReLU activation."
    assert task.constants == {"batch_size": 16, "dim": 16384}


def test_shapes_scale_down_for_the_cpu() -> None:
    # batch_size 16 -> 8 (no size goes below maxcode.kinds.kernelbench.scaling.MIN_SIZE)
    assert scaled_constants(PROBLEM, 0.25) == {"batch_size": 8, "dim": 4096}
    assert scaled_constants(PROBLEM, 0.0001) == {"batch_size": 8, "dim": 8}
    with pytest.raises(TaskError, match="scale"):
        scaled_constants(PROBLEM, 2.0)


BROKEN = {
    "syntax": (PROBLEM.replace("def forward(self, x", "def forward(self, x,,"), "syntax error"),
    "no model": (PROBLEM.replace("class Model(", "class Net("), "no class Model"),
    "not a module": (PROBLEM.replace("class Model(nn.Module)", "class Model(object)"), "nn.Module"),
    "no forward": (PROBLEM.replace("def forward", "def go"), "no forward"),
    "no inputs": (PROBLEM.replace("def get_inputs", "def make_inputs"), "get_inputs()"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_problem_files_are_task_errors(tmp_path: Path, case: str) -> None:
    text, words = BROKEN[case]
    with pytest.raises(TaskError, match=words):
        load_task(str(_write(tmp_path, "1_Broken.py", text)))


def test_a_level_folder_is_a_suite_in_numeric_order(tmp_path: Path) -> None:
    for name in ("10_Ten.py", "2_Two.py", "1_One.py", "notes.py"):
        _write(tmp_path, name)
    assert [path.name for path in kernelbench_suite(tmp_path)] == [
        "1_One.py",
        "2_Two.py",
        "10_Ten.py",
    ]


def test_broken_problem_files_are_clear_errors_for_eval_and_optimize(tmp_path: Path) -> None:
    candidate = _write(tmp_path, "new.py", PROBLEM.replace("class Model", "class ModelNew"))
    broken = _write(tmp_path, "3_Bad.py", "class Model(:\n")
    done = run_maxcode("eval", str(broken), str(candidate))
    assert done.returncode == 2 and "syntax error" in done.stderr and "Traceback" not in done.stderr
    incomplete = _write(tmp_path, "4_NoInputs.py", PROBLEM.replace("def get_inputs", "def inputs"))
    done = run_maxcode("optimize", str(incomplete), "--store", str(tmp_path / "s.db"))
    assert done.returncode == 2 and "missing get_inputs()" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_level_folder_is_a_bench_suite_in_id_order(tmp_path: Path) -> None:
    from maxcode.search.bench.suite import expand_suite

    for name in ("10_B.py", "2_A.py", "1_C.py"):
        _write(tmp_path / "level1", name)
    (tmp_path / "level1" / "notes.py").write_text("# not a problem\n")
    expanded = expand_suite([str(tmp_path / "level1")])
    assert [Path(spec).name for spec in expanded] == ["1_C.py", "2_A.py", "10_B.py"]
    one = _write(tmp_path, "3_D.py")
    assert expand_suite([str(one)]) == [str(one)]
