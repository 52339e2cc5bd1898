"""Nsight Compute (``ncu``) metrics for the kernels of one forward.

A fixed, small metric set per kernel: achieved occupancy, memory throughput and compute (SM)
throughput as shares of the device's peak, DRAM bytes and duration. ncu runs the sandboxed
worker (role ``kernels``), which warms the model up and runs one forward inside an NVTX range;
only kernels launched inside that range are profiled. The figures feed the critic, never the
reward: ncu replays each kernel to collect them, so its durations are not the timed ones.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from maxcode.kinds.kernelbench.worker.protocol import NVTX_RANGE, WorkerSpec
from maxcode.types import Feedback, KernelMetrics

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.runner import WorkerRunner

METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute",
    "dram__bytes.sum": "dram_bytes",
}
"""ncu metric name -> what it fills in ``KernelMetrics``."""

_TIME_UNITS = {
    "ns": 1e-9,
    "nsecond": 1e-9,
    "us": 1e-6,
    "usecond": 1e-6,
    "ms": 1e-3,
    "msecond": 1e-3,
    "s": 1.0,
    "second": 1.0,
}
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
TOP_KERNELS = 8


def find_ncu() -> Path | None:
    """The ncu executable (PATH, then the CUDA toolkit's usual place), or None."""
    found = shutil.which("ncu")
    if found:
        return Path(found)
    for candidate in (
        Path("/usr/local/cuda/bin/ncu"),
        *Path("/opt/nvidia").glob("nsight-compute/*/ncu"),
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def install_folders(ncu: Path) -> list[Path]:
    """Folders the sandboxed run must see for ncu to start: where the wrapper and the real
    installation live (the wrapper is often a link into /opt)."""
    folders = {ncu.parent, ncu.resolve().parent, Path("/opt/nvidia")}
    return sorted(folder for folder in folders if folder.is_dir())


def command(ncu: Path, log: Path, nvtx_range: str) -> list[str]:
    """The ncu command line that prefixes the worker's."""
    return [
        str(ncu),
        "--csv",
        "--log-file",
        str(log),
        "--metrics",
        ",".join(METRICS),
        "--nvtx",
        "--nvtx-include",
        f"{nvtx_range}/",
        # Locking clocks needs privileges the sandboxed uid does not have; figures are shares
        # of peak at the clocks the GPU runs at.
        "--clock-control",
        "none",
        "--target-processes",
        "application-only",
    ]


def failure_note(log_text: str) -> str:
    """A one-line reason from ncu's own log when it measured nothing."""
    if "ERR_NVGPUCTRPERM" in log_text:
        return "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)"
    for line in log_text.splitlines():
        if line.startswith("==ERROR=="):
            return "ncu: " + line.removeprefix("==ERROR==").strip()[:200]
    if "No kernels were profiled" in log_text:
        return "ncu profiled no kernels in the forward"
    return ""


def parse_csv(text: str, source: str = "") -> list[KernelMetrics]:
    """Kernels from ncu's ``--csv`` output (one row per kernel launch and metric), launches of
    the same kernel merged, longest first. Lines before the header (ncu's ``==PROF==`` notes)
    are skipped. A kernel whose name does not occur in ``source`` (the candidate's code) is
    marked as a library's."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[str, dict[str, float]] = defaultdict(dict)
    names: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        field = METRICS.get(row.get("Metric Name") or "")
        launch = row.get("ID")
        if field is None or launch is None:
            continue
        value = _number(row.get("Metric Value") or "", row.get("Metric Unit") or "", field)
        if value is None:
            continue
        names[launch] = (row.get("Kernel Name") or "?").strip()
        launches[launch][field] = value
    merged: dict[str, list[dict[str, float]]] = defaultdict(list)
    for launch, values in launches.items():
        merged[names[launch]].append(values)
    kernels = [_merge(name, values, source) for name, values in merged.items()]
    kernels.sort(key=lambda kernel: kernel.duration_s, reverse=True)
    return kernels[:TOP_KERNELS]


def _number(text: str, unit: str, field: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    if field == "duration":
        return value * _TIME_UNITS.get(unit, 1e-9)
    if field == "dram_bytes":
        return value * _BYTE_UNITS.get(unit, 1)
    return value / 100.0  # percentages


def base_name(kernel: str) -> str:
    """The kernel function's own name: ``void ns::gelu<float>(const float *)`` -> ``gelu``."""
    head = kernel.removeprefix("void ").split("(", 1)[0].split("<", 1)[0]
    names = _IDENTIFIER.findall(head.rsplit("::", 1)[-1])
    return names[-1] if names else kernel


def _merge(name: str, launches: list[dict[str, float]], source: str) -> KernelMetrics:
    """One kernel over its launches: times and bytes add up, shares are time-weighted."""
    total = sum(values.get("duration", 0.0) for values in launches)

    def weighted(field: str) -> float | None:
        known = [
            (values[field], values.get("duration", 0.0)) for values in launches if field in values
        ]
        if not known:
            return None
        weight = sum(duration for _, duration in known)
        if weight <= 0:
            return sum(value for value, _ in known) / len(known)
        return sum(value * duration for value, duration in known) / weight

    dram = [values["dram_bytes"] for values in launches if "dram_bytes" in values]
    return KernelMetrics(
        name=name[:120],
        launches=len(launches),
        duration_s=total,
        occupancy=weighted("occupancy"),
        memory_throughput=weighted("memory"),
        compute_throughput=weighted("compute"),
        dram_bytes=int(sum(dram)) if dram else None,
        library=re.search(rf"\b{re.escape(base_name(name))}\b", source) is None,
    )


def with_kernel_metrics(
    feedback: Feedback, runner: WorkerRunner, common: WorkerSpec, source: str, cache: Path
) -> Feedback:
    """The candidate's forward under Nsight Compute (a sandboxed run of its own, after the
    timed ones): its kernels with occupancy and throughput. Without ncu, or when ncu measures
    nothing, a note says why and the torch.profiler kernel times stand."""
    executable = find_ncu()
    if executable is None:
        note = "no ncu (Nsight Compute) here: kernel times come from torch.profiler only"
        return feedback.with_kernelbench(kernel_metrics_note=note)
    started = time.perf_counter()
    side = runner.run(
        "kernels",
        common,
        cache,
        prefix=tuple(command(executable, Path("ncu.csv"), NVTX_RANGE)),
        readonly=tuple(install_folders(executable)),
        collect="ncu.csv",
    )
    spent = time.perf_counter() - started
    kernels = parse_csv(side.collected, source)
    note = ""
    if not kernels:
        why = failure_note(side.collected + "\n" + side.sandbox.stderr)
        if not why and side.report is not None and side.report.stage != "ok":
            why = f"the profiled run failed: {side.report.message}"[:200]
        note = why or f"ncu measured no kernels (exit {side.sandbox.exit_code})"
    profiled = feedback.model_copy(
        update={"profile_seconds": (feedback.profile_seconds or 0.0) + spent}
    )
    return profiled.with_kernelbench(kernel_metrics=kernels, kernel_metrics_note=note)
