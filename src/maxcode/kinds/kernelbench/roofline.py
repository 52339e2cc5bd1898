"""The speed of light of a task (the reference's work and this device's measured rates) and the
cap it puts on a CUDA candidate's reward; what the reference alone decides (the roofline, the
``torch.compile`` baseline) measured once per task and kept."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from maxcode.harness.integrity import Verdict
from maxcode.kinds.kernelbench.parameters import KernelBenchSettings
from maxcode.kinds.kernelbench.problem import KernelBenchTask
from maxcode.types import Roofline

ROOFLINE_SLACK = 1.5
"""On CUDA, a candidate claiming to beat the memory floor (its bytes moved once at the measured
rate; the L2 is flushed before each call) by more than this is flagged and capped there (the
slack: a kernel may stream better than the measured copy and sum)."""

_MEASURED: dict[tuple[str, tuple[str, str, str]], dict[str, Any]] = {}
"""``roofline`` and ``compile`` measurements per task, kept here and in the cache folder (where
no sandboxed run can write)."""


def roofline_key(task: KernelBenchTask, settings: KernelBenchSettings) -> tuple[str, str, str]:
    shapes = json.dumps(task.scaling.overrides, sort_keys=True)
    return hashlib.sha256(task.reference.encode()).hexdigest(), shapes, settings.device


@functools.cache
def _measurer() -> tuple[str, str]:
    """What measures a task: the worker's code (a new harness measures again), torch's version."""
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
    from maxcode.home import cache_dir

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
    """The speed of light from the reference's work and rates (None: not or badly reported)."""
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
    """A candidate faster than moving its bytes once (by more than ``ROOFLINE_SLACK``) did not
    do the work while timed: ``implausible``, the reward capped."""
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
