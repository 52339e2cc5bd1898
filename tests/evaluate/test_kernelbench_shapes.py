"""``--check-scale``: a correct KernelBench candidate is checked again at other shapes (the
problem's sizes times the check scale, nothing timed). Right only at the problem's own shapes
is a ``shapes`` warning, shown to the critic and the policy; the reward stands."""

from __future__ import annotations

import json

import pytest

from maxcode.errors import TaskError
from maxcode.harness.integrity import category_of, consequence_of, void_findings
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench.problem import rescaled
from maxcode.kinds.load import load_task
from tests.helpers import REPO, run_maxcode

pytest.importorskip("torch")

EXAMPLES = REPO / "examples" / "kernelbench"
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
GELU = str(EXAMPLES / "1_ScaledGELU.py")


def test_a_kernel_written_for_the_problems_shapes_alone_is_reported_as_such() -> None:
    fixed = FIXTURES / "shapes" / "fixed_size.py"
    done = run_maxcode(
        "eval", GELU, str(fixed), "--scale", "0.25", "--check-scale", "0.5",
        "--rounds", "1", "--no-compile-baseline", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["correct"], result["error"]
    shapes = [flag for flag in result["flags"] if category_of(flag) == "shapes"]
    assert len(shapes) == 1, result["flags"]
    assert consequence_of(shapes[0]) == "warn"  # the reward is not taken for it
    assert shapes[0] not in void_findings(result["flags"])
    assert shapes[0].startswith(
        "shapes: correct at the problem's shapes, wrong at scale 0.5 "
        "(batch_size 256->128, dim 4096->2048): seed 0:"
    )


def test_a_kernel_right_at_any_shapes_gets_no_warning() -> None:
    task = load_task(GELU, scale=0.25)
    fixed = (FIXTURES / "shapes" / "fixed_size.py").read_text()
    source = fixed.replace("ELEMENTS = 64 * 1024", "ELEMENTS = None  # every element")
    assert source != fixed
    feedback = evaluate_task(task, source, check_scale=0.5)
    assert feedback.correct, feedback.error
    assert not [flag for flag in feedback.flags if category_of(flag) == "shapes"]


def test_a_check_scale_that_changes_nothing_or_a_task_without_shapes_is_refused() -> None:
    task = load_task(GELU, scale=0.5)
    with pytest.raises(TaskError, match="gives the problem's own shapes"):
        rescaled(task, 0.5)
    assert rescaled(task, 1.0).reference == load_task(GELU).reference
    honest = str(FIXTURES / "shapes" / "fixed_size.py")
    same = run_maxcode("eval", GELU, honest, "--scale", "0.5", "--check-scale", "0.5")
    assert same.returncode != 0 and "Traceback" not in same.stderr
    assert "gives the problem's own shapes" in same.stderr
    cpp = REPO / "examples" / "cpp" / "count_paths"
    refused = run_maxcode("eval", str(cpp), str(cpp / "reference.cpp"), "--check-scale", "0.5")
    assert refused.returncode != 0 and "--check-scale is for KernelBench tasks" in refused.stderr
