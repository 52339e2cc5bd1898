"""``maxcode regions``: a whole model's forward cut into regions, each written as a KernelBench
problem that the harness judges like any other."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from maxcode.kinds.load import load_task
from tests.helpers import REPO, eval_json, run_maxcode

TINY_BLOCK = REPO / "examples" / "models" / "tiny_block.py"
MODELS = REPO / "tests" / "fixtures" / "models"


def regions_json(*args: str) -> dict[str, Any]:
    done = run_maxcode("regions", *args, "--json", "--repeats", "3")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"region_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("regions")
    return regions_json(str(TINY_BLOCK), "--out", str(out)), out


def test_the_block_is_cut_into_its_modules_and_the_shares_add_up(
    block: tuple[dict[str, Any], Path],
) -> None:
    found, _ = block
    regions = {region["name"]: region for region in found["regions"]}
    # Four heavy products in the attention and two in the MLP: the block is cut into its parts;
    # the attention (two products of its own, written in its forward) and the MLP stay whole;
    # the two layer norms, alike (type, shapes, operators), are one region.
    assert set(regions) == {"attention", "mlp", "norm*"}
    assert regions["norm*"]["modules"] == ["norm1", "norm2"]
    shares = [region["share"] for region in found["regions"]]
    assert shares == sorted(shares, reverse=True) and all(0 < share < 1 for share in shares)
    assert sum(shares) + found["outside"] == pytest.approx(1.0)
    assert {"addmm", "bmm"} <= set(regions["attention"]["operators"])
    assert regions["mlp"]["operators"][:1] == ["addmm"]  # the heavy operator named first
    assert regions["mlp"]["heavy"] == 2 and regions["norm*"]["heavy"] == 0
    assert regions["attention"]["inputs"] == [
        {"tensor": [4, 128, 256], "dtype": "float32", "contiguous": True}
    ]
    assert all(
        region["bound"] == pytest.approx(1 / (1 - region["share"])) for region in found["regions"]
    )


def test_each_region_is_written_as_a_problem_that_loads_and_draws_fresh_inputs(
    block: tuple[dict[str, Any], Path],
) -> None:
    found, out = block
    written = [Path(region["problem"]) for region in found["regions"]]
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in written)
    for path in written:
        assert load_task(str(path)).kind == "kernelbench"
    attention = load(next(path for path in written if path.stem.endswith("attention")))
    first, second = attention.get_inputs(), attention.get_inputs()
    assert first[0].shape == (4, 128, 256) and not first[0].equal(second[0])
    import torch

    (module,) = attention.get_init_inputs()  # the module itself, as the whole model built it
    region = attention.Model(module)
    assert type(module).__name__ == "Attention"
    # Its weights are the whole model's as the probe built it (seed 0), whatever the seed now,
    # and building it leaves the random state as it was.
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    again = attention.get_init_inputs()[0]
    assert torch.random.get_rng_state().equal(state) and again is not module
    assert again.qkv.weight.equal(module.qkv.weight)
    torch.manual_seed(0)
    seeded = attention._WHOLE_MODEL(*attention._WHOLE_INIT_INPUTS())
    assert region.region.qkv.weight.equal(seeded.attention.qkv.weight)
    with torch.no_grad():
        assert region(first[0]).equal(seeded.attention(first[0]))


def test_a_written_region_judges_its_own_reference_correct_at_about_one(
    block: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    found, _ = block
    mlp = next(Path(region["problem"]) for region in found["regions"] if region["name"] == "mlp")
    identical = tmp_path / "identical.py"
    identical.write_text(mlp.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    result = eval_json(str(mlp), str(identical))
    assert result["correct"], result
    assert result["suspect"] is None and len(result["speedup_interval"]) == 2


def test_integer_inputs_are_drawn_in_the_range_the_forward_gave(tmp_path: Path) -> None:
    found = regions_json(str(MODELS / "embed_head.py"), "--out", str(tmp_path))
    embed = next(region for region in found["regions"] if region["name"] == "embed")
    # The in-place ReLU returns its input's memory: no problem can be judged on that.
    act = next(region for region in found["regions"] if region["name"] == "act")
    assert "returns memory of its input" in act["not_written"] and "problem" not in act
    assert embed["inputs"][0]["dtype"] == "int64"
    assert 0 <= embed["inputs"][0]["low"] <= embed["inputs"][0]["high"] < 50
    problem = load(Path(embed["problem"]))
    # Its region is taken from the whole model, whose __init__ calls super(Model, self).
    assert type(problem.Model(*problem.get_init_inputs()).region).__name__ == "Embedding"
    drawn = [problem.get_inputs()[0] for _ in range(5)]
    assert all(int(tokens.min()) >= 0 and int(tokens.max()) < 50 for tokens in drawn)
    assert not drawn[0].equal(drawn[1])


def test_the_python_api_gives_the_same_regions() -> None:
    import maxcode

    found = maxcode.regions(MODELS / "embed_head.py", repeats=2)
    assert {region.name for region in found.regions} == {
        "embed",
        "norm",
        "up",
        "act",
        "down",
        "head",
    }
    assert all(region.alike == [] for region in found.regions)
    assert all(region.written is None for region in found.regions)


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("missing.py", "no such model file"),
        ("broken_forward.py", "the model does not run: RuntimeError"),
    ],
)
def test_a_model_that_cannot_be_cut_is_refused_in_one_line(model: str, says: str) -> None:
    done = run_maxcode("regions", str(MODELS / model))
    assert done.returncode != 0 and done.stdout == ""
    assert says in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_table_names_the_regions_and_what_is_left_outside() -> None:
    done = run_maxcode("regions", str(MODELS / "embed_head.py"), "--repeats", "2")
    assert done.returncode == 0, done.stderr
    assert "embed" in done.stdout and "head" in done.stdout
    assert "outside any region:" in done.stdout
