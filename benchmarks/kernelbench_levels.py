"""Time the reference ``Model`` of every problem of KernelBench level folders at full size,
and write the times in the format of KernelBench's published baseline-time JSON
(``results/timing/<hardware>/baseline_time_torch.json``), so they compare problem by problem.

    python benchmarks/kernelbench_levels.py LEVEL_FOLDER [LEVEL_FOLDER ...] --out times.json
        [--device cuda|cpu] [--mode eager|compile] [--trials 100] [--warmup 3]
        [--max-seconds 1.0] [--only SUBSTRING ...] [--limit N] [--merge]
    python benchmarks/kernelbench_levels.py --compare ours.json published.json [--level level1]

The output is ``{"level1": {"19_ReLU.py": {"mean": ..., "std": ..., "min": ..., "max": ...,
"num_trials": ..., "hardware": ..., "device": ...}}}``: milliseconds rounded to 3 significant
figures, population std, the level named after its folder. Nothing else is in the file, so a
script written for theirs reads ours; torch version and mode are printed instead.

Protocol, as KernelBench's ``measure_ref_program_time`` with ``timing_method="cuda_event"``
(the one behind their H100_Modal files): ``torch.no_grad()``; seed 42 (CPU and CUDA) before
``get_inputs()`` and again before ``get_init_inputs()``; ``Model(*init_inputs)`` in fp32 (no
cast), model and tensor inputs on the device; ``--mode compile`` wraps it in
``torch.compile`` (inductor, default mode), so the compile falls in the warm-up; ``--warmup``
calls, each followed by a synchronize; ``torch.cuda.empty_cache()``; then trials, each:
synchronize, thrash the L2 cache (fill a 256 MiB tensor, as theirs: cold-cache times), CUDA
events around one call, synchronize. The first trial is discarded (``--discard-first``, as
theirs). On CPU, ``time.perf_counter`` around the call and no cache thrash.

Two departures, both to fit a whole level in a few minutes, both about cost rather than what is
timed: ``--max-seconds`` (default 1.0) ends a problem's trials once its trial loop has run that
long (``num_trials`` then says how many were done), and by default the inputs and the model are
created directly on the device (``--create-on device``: a ``torch.device`` context around
``get_inputs``, ``get_init_inputs`` and ``Model(...)``), because filling multi-GB inputs with
the CPU generator and copying them over takes longer than timing them. Values then come from
the device's generator, same distributions; ``--create-on cpu`` does it as KernelBench does.

A problem that fails (load error, exception, out of memory) is reported in one line, left out
of the JSON, and the run goes on; the JSON is rewritten after every problem, so a run cut short
keeps what it did (``--merge`` continues into an existing file). Exit status: 0 when every
problem was timed, 1 when some failed, 2 for bad arguments or input files.

Compare mode prints ours/published per problem in both files, sorted by ratio, the count, the
median ratio, the geometric mean, the problems outside 0.8-1.25, and those in only one file.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxcode.errors import TaskError
from maxcode.kinds.kernelbench.problem import kernelbench_suite

SEED = 42
"""KernelBench's ``set_seed(42)``, before inputs and again before init inputs."""
L2_THRASH_INT64S = 32 * 1024 * 1024
"""256 MiB of int64 filled before each CUDA trial, as KernelBench's ``clear_l2_cache``."""
OUTLIER_BAND = (0.8, 1.25)
"""Ratios ours/published outside this band are listed as outliers."""


class InputError(Exception):
    """A bad argument or input file: reported as one line, exit status 2."""


@dataclass
class Problem:
    """One KernelBench problem file."""

    level: str
    """The key in the JSON: the level folder's name (``level1``)."""
    path: Path

    @property
    def name(self) -> str:
        """The file name, the key KernelBench uses (``19_ReLU.py``)."""
        return self.path.name


# ---------------------------------------------------------------------------------------------
# Finding and loading problems


def find_problems(folders: list[str], only: list[str], limit: int | None) -> list[Problem]:
    problems: list[Problem] = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            raise InputError(f"{folder}: no such folder")
        try:
            files = kernelbench_suite(root)
        except TaskError:
            raise InputError(f"{folder}: no problem files (<id>_<Name>.py) in it") from None
        level = root.resolve().name
        problems += [Problem(level, p) for p in files if not only or any(s in p.name for s in only)]
    if not problems:
        raise InputError(f"no problem matches --only {' '.join(only)}")
    return problems[:limit] if limit is not None else problems


def load_problem(path: Path) -> dict[str, Any]:
    """The problem file's namespace, run as a module that is not ``__main__``."""
    namespace: dict[str, Any] = {"__name__": f"kernelbench_problem_{path.stem}"}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in namespace]
    if missing:
        raise ValueError(f"the file defines no {', '.join(missing)}")
    return namespace


# ---------------------------------------------------------------------------------------------
# Timing


def three_figures(value: float) -> float:
    """Rounded to 3 significant figures, as KernelBench's ``float(f"{x:.3g}")``."""
    return float(f"{value:.3g}")


def timing_stats(times_ms: list[float], hardware: str, device: str) -> dict[str, Any]:
    return {
        "mean": three_figures(statistics.fmean(times_ms)),
        "std": three_figures(statistics.pstdev(times_ms)),
        "min": three_figures(min(times_ms)),
        "max": three_figures(max(times_ms)),
        "num_trials": len(times_ms),
        "hardware": hardware,
        "device": device,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class Timer:
    """Runs one problem's model by the protocol on one device."""

    def __init__(self, torch: Any, args: argparse.Namespace) -> None:
        self.torch = torch
        self.args = args
        self.cuda = args.device == "cuda"
        if self.cuda:
            index = torch.cuda.current_device()
            self.device = torch.device(f"cuda:{index}")
            self.hardware = torch.cuda.get_device_name(index)
        else:
            self.device = torch.device("cpu")
            self.hardware = cpu_model()

    def synchronize(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def seed(self) -> None:
        self.torch.manual_seed(SEED)
        if self.cuda:
            self.torch.cuda.manual_seed(SEED)

    def to_device(self, values: list[Any]) -> list[Any]:
        return [v.to(self.device) if isinstance(v, self.torch.Tensor) else v for v in values]

    def build(self, namespace: dict[str, Any]) -> tuple[Any, list[Any]]:
        """The model on the device and its inputs, seeded as KernelBench seeds them."""
        torch = self.torch
        create_on = self.device if self.args.create_on == "device" else torch.device("cpu")
        with create_on:
            self.seed()
            inputs = self.to_device(list(namespace["get_inputs"]()))
            self.seed()
            init_inputs = self.to_device(list(namespace["get_init_inputs"]()))
            model = namespace["Model"](*init_inputs)
        model = model.to(self.device)
        if self.args.mode == "compile":
            torch._dynamo.reset()
            model = torch.compile(model, backend="inductor", mode="default")
        return model, inputs

    def trials(self, model: Any, inputs: list[Any]) -> list[float]:
        """Milliseconds per timed call, after the warm-up and the discarded first trials."""
        torch = self.torch
        args = self.args
        for _ in range(args.warmup):
            model(*inputs)
            self.synchronize()
        if self.cuda:
            torch.cuda.empty_cache()
        times_ms: list[float] = []
        trial = 0
        loop_start = time.perf_counter()
        while len(times_ms) < args.trials:
            self.synchronize()
            if self.cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                if args.l2_thrash:
                    thrash = torch.empty(L2_THRASH_INT64S, dtype=torch.int64, device=self.device)
                    thrash.fill_(42)
                    del thrash
                start.record()
                output = model(*inputs)
                end.record()
                self.synchronize()
                elapsed_ms = start.elapsed_time(end)
            else:
                began = time.perf_counter()
                output = model(*inputs)
                elapsed_ms = (time.perf_counter() - began) * 1000.0
            # Freed before the next call (KernelBench keeps it one call longer): the peak stays
            # at one output, which matters for multi-GB outputs; timed calls are unaffected.
            del output
            if trial >= args.discard_first:
                times_ms.append(elapsed_ms)
            trial += 1
            if times_ms and time.perf_counter() - loop_start > args.max_seconds:
                break
        return times_ms

    def time_problem(self, problem: Problem) -> dict[str, Any]:
        torch = self.torch
        model = inputs = None
        try:
            namespace = load_problem(problem.path)
            with torch.no_grad():
                model, inputs = self.build(namespace)
                self.synchronize()
                times_ms = self.trials(model, inputs)
            return timing_stats(times_ms, self.hardware, str(self.device))
        finally:
            del model, inputs
            self.release()

    def release(self) -> None:
        """Frees what the last problem left, before the next one allocates."""
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    message = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    return message if len(message) <= 240 else message[:237] + "..."


def write_times(path: Path, times: dict[str, dict[str, Any]]) -> None:
    """Written whole to a temporary file, then renamed: a run cut short leaves valid JSON."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(times, indent=4) + "\n", encoding="utf-8")
    os.replace(partial, path)


def run_levels(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    problems = find_problems(args.folders, args.only or [], args.limit)
    out = Path(args.out)
    times: dict[str, dict[str, Any]] = load_times(out) if args.merge and out.exists() else {}

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device (use --device cpu)")
    timer = Timer(torch, args)
    print(
        f"torch {torch.__version__} (cuda {torch.version.cuda}), device {timer.device} "
        f"({timer.hardware}), mode {args.mode}, fp32, tf32 matmul "
        f"{torch.backends.cuda.matmul.allow_tf32}, trials {args.trials} (max "
        f"{args.max_seconds:g} s), warm-up {args.warmup}, discard first {args.discard_first}, "
        f"create on {args.create_on}, {len(problems)} problems",
        flush=True,
    )
    failed: list[str] = []
    for problem in problems:
        started = time.perf_counter()
        label = f"{problem.level}/{problem.name}"
        stats: dict[str, Any] | None = None
        try:
            stats = timer.time_problem(problem)
        except Exception as error:  # every failure, OOM included, is the problem's own
            problem_error = one_line(error)
        seconds = time.perf_counter() - started
        if stats is None:
            # Freed only now: the exception's frames held the failed problem's tensors.
            timer.release()
            failed.append(f"{label}: {problem_error}")
            print(f"{label}  FAILED  {problem_error}  {seconds:.1f} s", flush=True)
            continue
        times.setdefault(problem.level, {})[problem.name] = stats
        write_times(out, times)
        print(
            f"{label}  mean {stats['mean']:g} ms  std {stats['std']:g}  "
            f"trials {stats['num_trials']}  {seconds:.1f} s",
            flush=True,
        )
    if not out.exists():
        write_times(out, times)
    print(f"timed {len(problems) - len(failed)} of {len(problems)} problems into {out}")
    if failed:
        print(f"failed ({len(failed)}):")
        for line in failed:
            print(f"  {line}")
    print(f"total elapsed {time.perf_counter() - began:.1f} s", flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Compare


def load_times(path: Path) -> dict[str, dict[str, Any]]:
    """A baseline-time JSON, checked: level -> problem file -> {"mean": ms, ...} or null."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error})") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a baseline-time JSON (the top level is not an object)")
    for level, problems in data.items():
        if not isinstance(problems, dict):
            raise InputError(f"{path}: level {level!r} is not an object of problems")
        for name, entry in problems.items():
            if entry is None:  # KernelBench writes null for a problem it could not time
                continue
            mean = entry.get("mean") if isinstance(entry, dict) else None
            if isinstance(mean, bool) or not isinstance(mean, (int, float)):
                raise InputError(f"{path}: {level}/{name} has no numeric 'mean'")
    return data


def _means(data: dict[str, dict[str, Any]], level: str | None) -> dict[str, float | None]:
    return {
        f"{lv}/{name}": (entry["mean"] if entry is not None else None)
        for lv, problems in data.items()
        if level is None or lv == level
        for name, entry in problems.items()
    }


def _hardware(data: dict[str, dict[str, Any]], level: str | None) -> str:
    names = {
        str(entry.get("hardware", "?"))
        for lv, problems in data.items()
        if level is None or lv == level
        for entry in problems.values()
        if entry is not None
    }
    return ", ".join(sorted(names)) or "?"


def _label_order(label: str) -> list[tuple[int, str]]:
    """Numbers as numbers: ``level1/9_x.py`` before ``level1/10_x.py`` before ``level2/...``."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", label)]


def compare(ours_path: str, published_path: str, level: str | None) -> int:
    ours_data = load_times(Path(ours_path))
    published_data = load_times(Path(published_path))
    ours = _means(ours_data, level)
    published = _means(published_data, level)
    rows: list[tuple[float, str, float, float]] = []
    unusable: list[str] = []
    for name in ours.keys() & published.keys():
        mine, theirs = ours[name], published[name]
        if mine is None or theirs is None or mine <= 0 or theirs <= 0:
            unusable.append(name)
        else:
            rows.append((mine / theirs, name, mine, theirs))
    rows.sort()
    print(f"ours:      {ours_path} ({_hardware(ours_data, level)})")
    print(f"published: {published_path} ({_hardware(published_data, level)})")
    if rows:
        print(f"{'ratio':>8}  {'ours ms':>10}  {'published ms':>12}  problem")
        for ratio, name, mine, theirs in rows:
            print(f"{ratio:8.3f}  {mine:10.4g}  {theirs:12.4g}  {name}")
    print(f"compared: {len(rows)}" + (f" ({level})" if level else ""))
    if rows:
        ratios = [r[0] for r in rows]
        print(f"median ratio (ours/published): {statistics.median(ratios):.3f}")
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"geometric mean ratio: {geomean:.3f}")
        low, high = OUTLIER_BAND
        outliers = [r for r in rows if not low <= r[0] <= high]
        print(f"outliers outside {low:g}-{high:g}: {len(outliers)}")
        for ratio, name, mine, theirs in outliers:
            print(
                f"  outlier {name}: ratio {ratio:.3f} "
                f"(ours {mine:.4g} ms, published {theirs:.4g} ms)"
            )
    for title, names in (
        ("only in ours", sorted(ours.keys() - published.keys(), key=_label_order)),
        ("only in published", sorted(published.keys() - ours.keys(), key=_label_order)),
        ("without a time in one file", sorted(unusable, key=_label_order)),
    ):
        print(f"{title}: {len(names)}")
        for name in names:
            print(f"  {name}")
    return 0 if rows else 1


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time KernelBench reference models per level folder, in KernelBench's "
        "baseline-time JSON format; or compare two such files.",
    )
    parser.add_argument("folders", nargs="*", metavar="LEVEL_FOLDER")
    parser.add_argument("--out", help="the JSON to write (rewritten after every problem)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--mode", choices=("eager", "compile"), default="eager")
    parser.add_argument("--trials", type=int, default=100, help="timed calls (default 100)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls (default 3)")
    parser.add_argument(
        "--discard-first", type=int, default=1, help="trials run but not kept (default 1)"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=1.0,
        help="end a problem's trials once its trial loop has run this long (default 1.0)",
    )
    parser.add_argument(
        "--only", action="append", metavar="SUBSTRING", help="problem files containing it"
    )
    parser.add_argument("--limit", type=int, help="the first N problems (after --only)")
    parser.add_argument(
        "--create-on",
        choices=("device", "cpu"),
        default="device",
        help="where inputs and model are created (default: on the device, quicker)",
    )
    parser.add_argument(
        "--no-l2-thrash",
        dest="l2_thrash",
        action="store_false",
        help="do not fill 256 MiB before each CUDA trial (warm-cache times)",
    )
    parser.add_argument("--merge", action="store_true", help="add to an existing --out file")
    parser.add_argument("--compare", nargs=2, metavar=("OURS", "PUBLISHED"))
    parser.add_argument("--level", help="with --compare: only this level (level1)")
    args = parser.parse_args(argv)
    if args.compare:
        if args.folders:
            parser.error("--compare takes no LEVEL_FOLDER")
    else:
        if not args.folders:
            parser.error("give at least one LEVEL_FOLDER, or --compare OURS PUBLISHED")
        if not args.out:
            parser.error("--out is required")
        if args.trials < 1 or args.warmup < 0 or args.discard_first < 0:
            parser.error("--trials must be at least 1, --warmup and --discard-first at least 0")
        if args.max_seconds <= 0 or (args.limit is not None and args.limit < 1):
            parser.error("--max-seconds must be positive, --limit at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.compare:
            return compare(args.compare[0], args.compare[1], args.level)
        return run_levels(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
