"""``benchmarks/kernelbench_levels.py``: times a level folder into KernelBench's baseline-time
JSON format on CPU, reports failures apart, and compares two such files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernelbench_levels.py"

pytest.importorskip("torch")

PROBLEMS = {
    "1_Add.py": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b

size = 4096

def get_inputs():
    return [torch.rand(size), torch.rand(size)]

def get_init_inputs():
    return []
""",
    "2_Linear.py": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 8
in_features = 64
out_features = 32

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
""",
    "3_Broken.py": """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom in forward")

def get_inputs():
    return [torch.rand(4)]

def get_init_inputs():
    return []
""",
    "4_Slow.py": """
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        time.sleep(0.05)
        return x * 2

def get_inputs():
    return [torch.rand(4)]

def get_init_inputs():
    return []
""",
}


def _script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def level_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "level1"
    folder.mkdir()
    for name, source in PROBLEMS.items():
        (folder / name).write_text(source.lstrip())
    return folder


def test_times_a_level_then_compares_with_a_published_file(
    level_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ours.json"
    result = _script(level_folder, "--out", out, "--device", "cpu", "--trials", "5",
                     "--warmup", "1", "--max-seconds", "5", "--only", "Add",
                     "--only", "Linear", "--only", "Broken")  # fmt: skip
    assert result.returncode == 1, result.stderr  # one problem failed, the rest were timed
    assert "Traceback" not in result.stdout + result.stderr

    times = json.loads(out.read_text())
    assert list(times) == ["level1"]
    assert list(times["level1"]) == ["1_Add.py", "2_Linear.py"]  # the failed one is left out
    for stats in times["level1"].values():
        assert set(stats) == {"mean", "std", "min", "max", "num_trials", "hardware", "device"}
        assert 0 < stats["min"] <= stats["mean"] <= stats["max"]
        assert stats["std"] >= 0
        assert stats["num_trials"] == 5
        assert stats["device"] == "cpu"
        assert isinstance(stats["hardware"], str) and stats["hardware"]
        assert float(f"{stats['mean']:.3g}") == stats["mean"]  # 3 significant figures

    lines = result.stdout.splitlines()
    assert any(line.startswith("level1/1_Add.py  mean ") and "trials 5" in line for line in lines)
    failed_at = lines.index("failed (1):")
    assert lines[failed_at + 1] == "  level1/3_Broken.py: RuntimeError: boom in forward"
    assert "total elapsed" in lines[-1]

    # The published file: the same problems at half and at the same time, plus one we lack.
    add, linear = times["level1"]["1_Add.py"], times["level1"]["2_Linear.py"]
    published = tmp_path / "published.json"
    published.write_text(
        json.dumps(
            {
                "level1": {
                    "1_Add.py": {**add, "mean": add["mean"]},
                    "2_Linear.py": {**linear, "mean": linear["mean"] / 2},
                    "9_Missing.py": {**add, "mean": 1.0},
                },
                "level2": {"1_Other.py": {**add, "mean": 1.0}},
            }
        )
    )
    compared = _script("--compare", out, published, "--level", "level1")
    assert compared.returncode == 0, compared.stderr
    report = compared.stdout.splitlines()
    assert "compared: 2 (level1)" in report
    assert "median ratio (ours/published): 1.500" in report
    assert "geometric mean ratio: 1.414" in report
    assert "outliers outside 0.8-1.25: 1" in report
    assert any(line.startswith("  outlier level1/2_Linear.py: ratio 2.000") for line in report)
    assert report[report.index("only in published: 1") + 1] == "  level1/9_Missing.py"
    # The table is sorted by ratio: Add (1.0) before Linear (2.0).
    header = next(i for i, line in enumerate(report) if line.split()[:1] == ["ratio"])
    table = [line.split() for line in report[header + 1 : header + 3]]
    assert [row[-1] for row in table] == ["level1/1_Add.py", "level1/2_Linear.py"]
    assert [row[0] for row in table] == ["1.000", "2.000"]

    everything = _script("--compare", out, published)
    assert "compared: 2" in everything.stdout.splitlines()
    assert "  level2/1_Other.py" in everything.stdout.splitlines()


def test_max_seconds_ends_the_trials_early(level_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "slow.json"
    result = _script(level_folder, "--out", out, "--device", "cpu", "--only", "Slow",
                     "--trials", "100", "--warmup", "0", "--max-seconds", "0.2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    stats = json.loads(out.read_text())["level1"]["4_Slow.py"]
    assert 1 <= stats["num_trials"] <= 6
    assert stats["mean"] >= 50  # milliseconds: the model sleeps 0.05 s


def test_bad_folders_and_files_are_one_line_errors(level_folder: Path, tmp_path: Path) -> None:
    empty = tmp_path / "level9"
    empty.mkdir()
    not_json = tmp_path / "not.json"
    not_json.write_text("{ nope")
    wrong_shape = tmp_path / "shape.json"
    wrong_shape.write_text(json.dumps({"level1": {"1_Add.py": {"std": 1.0}}}))
    out = tmp_path / "x.json"
    cases = [
        ([tmp_path / "absent", "--out", out, "--device", "cpu"], "no such folder"),
        ([empty, "--out", out, "--device", "cpu"], "no problem files"),
        ([level_folder, "--out", out, "--device", "cpu", "--only", "Nothing"], "no problem"),
        (["--compare", tmp_path / "absent.json", not_json], "no such file"),
        (["--compare", not_json, not_json], "not valid JSON"),
        (["--compare", wrong_shape, wrong_shape], "has no numeric 'mean'"),
    ]
    for args, message in cases:
        result = _script(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert result.stderr.startswith("error: ")
    assert not out.exists()
