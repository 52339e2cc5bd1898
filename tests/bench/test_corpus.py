"""``benchmarks/corpus.py``: which candidates need CUDA, Spearman's rank correlation, and a run
of the script on a small corpus of its own (written here; no published kernel is copied)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus.py"

pytest.importorskip("torch")


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # The dataclasses look their module up by name while they are made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_script()

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
"""

PURE_TORCH = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # Faster than torch.relu on torch.cuda, they say (a comment needs no GPU).
        return x.clamp_min(0.0)
"""

NEEDS_CUDA = PURE_TORCH.replace("return x.clamp_min(0.0)", "return x.cuda().clamp_min(0.0)")


@pytest.mark.parametrize(
    ("source", "markers"),
    [
        (PURE_TORCH, []),
        (NEEDS_CUDA, [".cuda()"]),
        ("torch.backends.cudnn.benchmark = True\nok = x.is_cuda\n", []),
        ("torch.backends.cuda.matmul.allow_tf32 = True\n", []),
        ("y = torch.empty(4, device='cuda')\n", ['"cuda" device']),
        ('y = x.to("cuda:0")\n', ['"cuda" device']),
        ("torch.cuda.synchronize()\n", ["torch.cuda"]),
        ("from torch import cuda\n", ["torch.cuda"]),
        ("graph = torch.cuda.CUDAGraph()\n", ["CUDA graph", "torch.cuda"]),
        ("side = torch.cuda.Stream()\n", ["CUDA stream", "torch.cuda"]),
        ("import triton\nimport triton.language as tl\n", ["triton"]),
        ("import cupy as cp\n", ["cupy"]),
        (
            "from torch.utils.cpp_extension import load_inline\n"
            "ext = load_inline('k', cpp_sources=CPP, cuda_sources=CU, functions=['f'])\n",
            ["CUDA sources"],
        ),
        (
            "from torch.utils.cpp_extension import load\n"
            "ext = load('k', sources=['/tmp/k/kernel.cu'])\n",
            [".cu file"],
        ),
        ('SOURCE = """__global__ void k(float* x) {}"""\n', ["CUDA kernel"]),
        # A C++ extension without CUDA builds and runs on a CPU.
        (
            "from torch.utils.cpp_extension import load_inline\n"
            "ext = load_inline('k', cpp_sources=CPP, functions=['f'])\n",
            [],
        ),
    ],
)
def test_cuda_markers_name_what_needs_a_gpu(source: str, markers: list[str]) -> None:
    assert corpus.cuda_markers(source) == markers


def test_a_problem_is_skipped_for_missing_code_or_for_cuda_on_a_cpu() -> None:
    def problem(custom_code: str) -> object:
        return corpus.Problem("level1/1", 1, 1, PROBLEM, custom_code, 2.0)

    assert corpus.why_skipped(problem(""), "cpu") == "no custom code"
    assert corpus.why_skipped(problem("None"), "cuda").startswith("no custom code")
    assert corpus.why_skipped(problem(NEEDS_CUDA), "cpu") == "needs CUDA: .cuda()"
    assert corpus.why_skipped(problem(NEEDS_CUDA), "cuda") == ""
    assert corpus.why_skipped(problem(PURE_TORCH), "cpu") == ""


def test_spearman_uses_average_ranks_for_ties() -> None:
    assert corpus.average_ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]
    assert corpus.spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert corpus.spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # Ranks x (1, 2, 3, 4, 5), y (1.5, 1.5, 3, 5, 4): r = 8.5 / sqrt(10 * 9.5).
    rho = corpus.spearman([1.0, 2.0, 3.0, 4.0, 5.0], [7.0, 7.0, 8.0, 10.0, 9.0])
    assert rho == pytest.approx(8.5 / (10 * 9.5) ** 0.5)
    assert corpus.spearman([1.0], [2.0]) is None
    assert corpus.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) is None


def test_a_small_corpus_runs_through_maxcode_eval(tmp_path: Path) -> None:
    rows = [
        {"level_id": 1, "task_id": 1, "ref_code": PROBLEM, "custom_code": PURE_TORCH,
         "score_default": 1.5},
        {"level_id": 1, "task_id": 2, "ref_code": PROBLEM, "custom_code": NEEDS_CUDA,
         "score_default": 3.0},
        {"level_id": 2, "task_id": 7, "ref_code": PROBLEM, "custom_code": None,
         "score_default": None},
    ]  # fmt: skip
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(source), "--device", "cpu", "--rounds", "1",
         "--timeout", "240", "--jsonl", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr

    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["problem"] for row in written] == ["level1/1", "level1/2", "level2/7"]
    assert all(row["schema_version"] == corpus.ROW_SCHEMA for row in written)
    ran, cuda, empty = written
    assert ran["ran"] and ran["compiled"] and ran["correct"], ran
    assert ran["void"] == "" and ran["score"] == 1.5
    assert ran["speedup"] is not None and ran["interval"] is not None  # measured, not void
    assert cuda["skipped"] == "needs CUDA: .cuda()" and not cuda["ran"]
    assert empty["skipped"] == "no custom code" and empty["score"] is None

    lines = done.stdout.splitlines()
    assert sum(line.startswith("level1/1 ") for line in lines) == 1
    assert not any(line.startswith(("level1/2 ", "level2/7 ")) for line in lines)
    assert any(
        "3 problems chosen: 1 with no custom code" in line
        and "1 skipped as needing CUDA, 1 to run" in line
        for line in lines
    ), done.stdout
    assert "evaluated 1 on cpu, scale full, rounds 1: 1 ran, 1 compiled, 1 correct, 0 void" in (
        lines
    )
    # One pair: no correlation, but the medians of the pair.
    assert any(line.startswith("correct and not void, with their score: 1;") for line in lines)
    medians = [line for line in lines if line.startswith("median speedup: ours ")]
    assert len(medians) == 1 and medians[0].endswith("theirs 1.500"), done.stdout
