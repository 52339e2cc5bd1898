"""The speed of light of a task (the reference's work and this device's measured rates), the
cap it puts on a CUDA candidate's reward, and the candidate's kernels under Nsight Compute."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxcode.harness.integrity import Verdict
from maxcode.kinds.kernelbench import ncu
from maxcode.kinds.kernelbench.problem import KernelBenchTask
from maxcode.kinds.kernelbench.settings import KernelBenchSettings
from maxcode.kinds.kernelbench.worker.protocol import NVTX_RANGE, WorkerSpec
from maxcode.types import Feedback, Roofline

if TYPE_CHECKING:
    from maxcode.kinds.kernelbench.runner import WorkerRunner

ROOFLINE_SLACK = 1.5
"""On CUDA, a candidate claiming to beat the memory floor (its inputs, weights and outputs
moved once at the measured rate) by more than this factor is flagged and its reward capped
there. The timed calls flush the L2 cache first, so those bytes must come from device memory;
1.5 leaves room for a kernel that streams better than the measured copy and sum."""

_MEASURED: dict[tuple[str, tuple[str, str, str]], dict[str, Any]] = {}
"""What the reference alone decides, per kind, reference, shapes and device, measured once per
task (kept in this process and in the cache folder, where no sandboxed run can write). Kinds:
``roofline`` (work and rates) and ``compile`` (torch.compile against eager, ``evaluator``)."""


def roofline_key(task: KernelBenchTask, settings: KernelBenchSettings) -> tuple[str, str, str]:
    shapes = json.dumps(task.scaling.overrides, sort_keys=True)
    return hashlib.sha256(task.reference.encode()).hexdigest(), shapes, settings.device


@functools.cache
def _measurer() -> tuple[str, str]:
    """What measures a task: the worker's own code (a new harness measures again) and torch's
    version. Read once per process, not on every round's lookup."""
    import importlib.metadata

    from maxcode.kinds.kernelbench.runner import worker_sources

    code = hashlib.sha256()
    for name, text in worker_sources():
        code.update(f"{name}\0{text}".encode())
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    return code.hexdigest(), version


def _stored(key: tuple[str, str, str], kind: str) -> Path:
    """The file of a task's measurement, named after the key and what measures it."""
    from maxcode.config import cache_dir

    named = json.dumps([*key, *_measurer()])
    name = hashlib.sha256(named.encode()).hexdigest()[:24]
    return cache_dir("kernelbench") / f"{kind}-{name}.json"


def known(key: tuple[str, str, str], kind: str = "roofline") -> dict[str, Any] | None:
    if (kind, key) not in _MEASURED:
        try:
            stored = json.loads(_stored(key, kind).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(stored, dict):
            _MEASURED[kind, key] = stored
    return _MEASURED.get((kind, key))


def remember(
    key: tuple[str, str, str], measured: object, kind: str = "roofline"
) -> dict[str, Any] | None:
    """Keep the first measurement of a task; returns the one kept."""
    if isinstance(measured, dict) and known(key, kind) is None:
        _MEASURED[kind, key] = measured
        path = _stored(key, kind)
        try:
            staging = path.with_suffix(f".{os.getpid()}.tmp")
            staging.write_text(json.dumps(measured), encoding="utf-8")
            os.replace(staging, path)
        except OSError:
            pass  # kept in this process only
    return _MEASURED.get((kind, key))


def roofline(measured: object, candidate_s: float) -> Roofline | None:
    """The speed of light from the reference's measured work and rates (None when the
    reference did not report them, or reported nonsense)."""
    if not isinstance(measured, dict):
        return None
    try:
        flops, moved = int(measured["flops"]), int(measured["bytes"])
        flop_rate, byte_rate = float(measured["flop_rate"]), float(measured["byte_rate"])
    except (KeyError, TypeError, ValueError):
        return None
    if byte_rate <= 0 or moved < 0 or flops < 0 or flop_rate < 0:
        return None
    memory_floor = moved / byte_rate
    floor = max(memory_floor, flops / flop_rate if flop_rate > 0 else 0.0)
    return Roofline(
        flops=flops,
        bytes=moved,
        flop_rate=flop_rate,
        byte_rate=byte_rate,
        floor_s=floor,
        memory_floor_s=memory_floor,
        fraction=floor / candidate_s if candidate_s > 0 else None,
    )


def cap_at_light(
    verdict: Verdict, speedup: float, reference_cost: float, light: Roofline
) -> tuple[float, Roofline]:
    """A candidate faster than moving its bytes once (by more than ``ROOFLINE_SLACK``) did
    not do the work while timed, or skips inputs the task reads: an ``implausible`` finding
    (a warning) and the reward capped at the slack."""
    limit_s = light.memory_floor_s / ROOFLINE_SLACK
    claimed_s = reference_cost / speedup
    if claimed_s >= limit_s:
        return speedup, light
    verdict.flag(
        "implausible",
        f"faster than the speed of light ({claimed_s * 1e6:.2f} us per call, "
        f"but moving its {light.bytes / 1e6:.2f} MB once takes "
        f"{light.memory_floor_s * 1e6:.2f} us at the measured "
        f"{light.byte_rate / 1e9:.0f} GB/s); reward capped at {ROOFLINE_SLACK:g}x that",
    )
    capped = reference_cost / limit_s
    return min(speedup, capped), light.model_copy(
        update={"capped": True, "fraction": light.floor_s / limit_s}
    )


def with_kernel_metrics(
    feedback: Feedback, runner: WorkerRunner, common: WorkerSpec, source: str, cache: Path
) -> Feedback:
    """The candidate's forward under Nsight Compute (a sandboxed run of its own, after the
    timed ones): its kernels with occupancy and throughput. Without ncu, or when ncu measures
    nothing, a note says why and the torch.profiler kernel times stand."""
    executable = ncu.find_ncu()
    if executable is None:
        note = "no ncu (Nsight Compute) here: kernel times come from torch.profiler only"
        return feedback.model_copy(update={"kernel_metrics_note": note})
    started = time.perf_counter()
    side = runner.run(
        "kernels",
        common,
        cache,
        prefix=tuple(ncu.command(executable, Path("ncu.csv"), NVTX_RANGE)),
        readonly=tuple(ncu.install_folders(executable)),
        collect="ncu.csv",
    )
    spent = time.perf_counter() - started
    kernels = ncu.parse_csv(side.collected, source)
    note = ""
    if not kernels:
        why = ncu.failure_note(side.collected + "\n" + side.sandbox.stderr)
        if not why and side.report is not None and side.report.stage != "ok":
            why = f"the profiled run failed: {side.report.message}"[:200]
        note = why or f"ncu measured no kernels (exit {side.sandbox.exit_code})"
    return feedback.model_copy(
        update={
            "kernel_metrics": kernels,
            "kernel_metrics_note": note,
            "profile_seconds": (feedback.profile_seconds or 0.0) + spent,
        }
    )
