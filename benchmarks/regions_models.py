"""Whole models cut into regions: for KernelBench level-3 models of different families, what
``maxcode regions`` finds (regions, the share of the forward they cover) and whether every
region problem it writes judges its own reference correct at about 1.0x.

Given a checkout of ScalingIntelligence/KernelBench (the folder holding ``level3``; its files
stay outside this repository), it runs for each model ``maxcode regions MODEL --scale S --out
DIR --json`` as a user would, then ``maxcode eval REGION IDENTICAL --json`` for each region
written (IDENTICAL: the region's file with ``class ModelNew(Model): pass``), and prints per
model: regions, coverage, the seconds ``regions`` took, regions judged correct, their speedups'
range, or the one-line error of a model that could not be cut.

    python benchmarks/regions_models.py KERNELBENCH_DIR [--only 1_MLP,35_LSTM] [--judge N]
        [--rounds R] [--repeats 5] [--optimize N] [--jsonl rows.jsonl]

``--optimize N`` also runs ``maxcode optimize MODEL --regions N --depth 1 --candidates 1``
offline (the ``rules`` proposer) and prints the model's result: its regions kept, the model's
speedup with its interval, and the predicted one.

The models and the scale each runs at on a 2-core CPU are ``MODELS`` (a family each: MLP,
ResNet, VGG, MinGPT, LSTM, EfficientNet, ViT, Mamba2; Mamba2 imports ``einops``, which
maxcode does not install). ``--judge N`` judges only each model's first N regions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODELS = {
    "1_MLP": 0.25,
    "9_ResNet18": 0.25,
    "11_VGG16": 1.0,  # its classifier is written for 224x224 images: it runs unscaled only
    "44_MiniGPTBlock": 0.25,
    "35_LSTM": 0.25,
    "21_EfficientNetMBConv": 0.25,
    "28_VisionTransformer": 0.5,  # the image must stay a multiple of the 16-pixel patch
    "48_Mamba2ReturnY": 0.5,  # its sequence must stay a multiple of its 64-step blocks
}
"""Level-3 models, one per family, with the scale each runs at here."""

BAND = (0.9, 1.1)
"""An identical region's speedup should fall in here."""
COMMAND_TIMEOUT_S = 1800


@dataclass
class Row:
    model: str
    scale: float
    error: str = ""
    regions: list[str] = field(default_factory=list)
    coverage: float = 0.0
    seconds: float = 0.0
    """Wall time of ``maxcode regions``."""
    judged: int = 0
    correct: int = 0
    speedups: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    model_result: str = ""
    """With ``--optimize``: the offline ``optimize --regions`` result, in one line."""


def maxcode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def judge_identical(problem: Path, rounds: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="maxcode-regions-bench-") as folder:
        candidate = Path(folder) / "identical.py"
        candidate.write_text(
            problem.read_text(encoding="utf-8") + "\n\nclass ModelNew(Model):\n    pass\n",
            encoding="utf-8",
        )
        done = maxcode(
            "eval",
            str(problem),
            str(candidate),
            "--json",
            *(["--rounds", str(rounds)] if rounds else []),
        )
    if done.returncode != 0:
        return {"error": last_line(done.stderr)}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure(model: Path, scale: float, options: argparse.Namespace) -> Row:
    row = Row(model.stem, scale)
    with tempfile.TemporaryDirectory(prefix="maxcode-regions-out-") as out:
        started = time.perf_counter()
        done = maxcode(
            "regions",
            str(model),
            "--scale",
            str(scale),
            "--repeats",
            str(options.repeats),
            "--out",
            out,
            "--json",
        )
        row.seconds = time.perf_counter() - started
        if done.returncode != 0:
            row.error = last_line(done.stderr)
            return row
        found = json.loads(done.stdout)
        row.regions = [
            f"{region['name']} {100 * region['share']:.1f}%" for region in found["regions"]
        ]
        row.coverage = 1.0 - found["outside"]
        for region in found["regions"][: options.judge]:
            if "problem" not in region:
                row.failures.append(f"{region['name']}: not written: {region['not_written']}")
                continue
            row.judged += 1
            result = judge_identical(Path(region["problem"]), options.rounds)
            if result.get("correct"):
                row.correct += 1
                row.speedups.append(float(result["speedup"]))
            else:
                why = result.get("error") or result.get("summary", "incorrect")
                row.failures.append(f"{region['name']}: {why}")
    if options.optimize:
        row.model_result = optimize_offline(model, scale, options.optimize)
    return row


def optimize_offline(model: Path, scale: float, count: int) -> str:
    """``maxcode optimize MODEL --regions COUNT`` with the offline proposer, in one line."""
    with tempfile.TemporaryDirectory(prefix="maxcode-regions-run-") as folder:
        done = maxcode(
            "optimize", str(model), "--regions", str(count), "--scale", str(scale),
            "--depth", "1", "--candidates", "1", "--store", f"{folder}/runs.db", "--json",
        )  # fmt: skip
    if done.returncode != 0:
        return f"optimize --regions failed: {last_line(done.stderr)}"
    result = json.loads(done.stdout)
    kept = [region["name"] for region in result["regions"] if region["kept"]]
    alone = [
        f"{region['name']} {region['speedup']:.2f}x"
        for region in result["regions"]
        if region.get("speedup") is not None
    ]
    model_part = result["model"]
    interval = model_part["speedup_interval"]
    spread = f" ({interval[0]:.2f}-{interval[1]:.2f})" if interval else ""
    return (
        f"alone: {', '.join(alone) or 'no run'}; kept {', '.join(kept) or 'none'}; "
        f"model correct={model_part['correct']} "
        f"{model_part['speedup']:.2f}x{spread}, predicted {model_part['predicted']:.2f}x"
    )


def print_row(row: Row) -> None:
    if row.error:
        print(f"{row.model:<24} {row.scale:>5g}  could not be cut: {row.error}")
        return
    spread = f"{min(row.speedups):.2f}-{max(row.speedups):.2f}x" if row.speedups else "-"
    print(
        f"{row.model:<24} {row.scale:>5g} {len(row.regions):>7} {100 * row.coverage:>8.1f}%"
        f" {row.seconds:>8.1f} {row.correct:>4}/{row.judged:<4} {spread:>12}"
    )
    print(f"{'':<31}{'; '.join(row.regions[:6])}{' ...' if len(row.regions) > 6 else ''}")
    for failure in row.failures:
        print(f"{'':<31}! {failure}")
    if row.model_result:
        print(f"{'':<31}optimize --regions: {row.model_result}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the KernelBench checkout (holds level3)")
    parser.add_argument("--only", default="", help="comma-separated model stems of MODELS")
    parser.add_argument("--judge", type=int, default=None, help="judge each model's first N")
    parser.add_argument("--rounds", type=int, default=None, help="maxcode eval --rounds")
    parser.add_argument("--repeats", type=int, default=5, help="maxcode regions --repeats")
    parser.add_argument("--optimize", type=int, default=0, help="also optimize --regions N offline")
    parser.add_argument("--jsonl", type=Path, default=None, help="also write the rows here")
    options = parser.parse_args()
    chosen = [name.strip() for name in options.only.split(",") if name.strip()] or list(MODELS)
    unknown = [name for name in chosen if name not in MODELS]
    if unknown:
        raise SystemExit(f"--only: not among MODELS: {', '.join(unknown)}")
    folder = options.root / "level3"
    if not folder.is_dir():
        folder = options.root / "KernelBench" / "level3"
    if not folder.is_dir():
        raise SystemExit(f"{options.root}: no level3 folder (a KernelBench checkout?)")
    print(
        f"{'model':<24} {'scale':>5} {'regions':>7} {'covered':>9} {'cut s':>8} "
        f"{'ok/judged':<9} {'identical':>12}"
    )
    rows = []
    for name in chosen:
        row = measure(folder / f"{name}.py", MODELS[name], options)
        rows.append(row)
        print_row(row)
        sys.stdout.flush()
        if options.jsonl:
            with options.jsonl.open("a", encoding="utf-8") as sink:
                sink.write(json.dumps(asdict(row)) + "\n")
    cut = [row for row in rows if not row.error]
    wide = sum(row.coverage >= 0.9 for row in cut)
    banded = all(BAND[0] <= speedup <= BAND[1] for row in cut for speedup in row.speedups)
    print(
        f"\n{len(cut)}/{len(rows)} models cut; {wide} of them cover at least 90% of the forward; "
        f"{sum(row.correct for row in cut)}/{sum(row.judged for row in cut)} region problems "
        f"judge their own reference correct; all identical speedups within {BAND}: {banded}"
    )


if __name__ == "__main__":
    main()
