"""What this machine serves: the devices (``cpu``, ``cuda``) and the candidates' kernel
languages, ``cuda`` (``load_inline``), ``triton`` (``@triton.jit``) and ``cpp`` (C++ extensions
on a CPU), checked before anything runs. On a CPU a Triton candidate runs in Triton's
interpreter: checked, not timed (``interpreted``). A forward that launches none of the
candidate's own kernels (worker ``launches``) is not a Triton result (``backend``: void).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.errors import MaxcodeError, TaskError
from maxcode.kinds.kernelbench.evidence import LaunchCount, WorkerReport

BACKENDS: tuple[str, ...] = ("cuda", "triton")
"""What ``--backend`` accepts; without it, ``cuda`` on a GPU and ``cpp`` on a CPU."""


def check_device(
    device: str, compile_only: bool = False, backend: str | None = None, *, lazy: bool = False
) -> Any:
    """PyTorch, once it is known to reach ``device`` (``compile_only``: its compiler) and serve
    ``backend`` (else a clear error); ``lazy``: on a CPU, None, the import left to the caller
    (it can overlap the workers' start-up)."""
    if device not in ("cpu", "cuda"):
        raise MaxcodeError(f"unknown device {device!r} (cpu or cuda)")
    check_backend(backend, device, compile_only)
    if importlib.util.find_spec("torch") is None:
        raise TaskError("KernelBench tasks need PyTorch: pip install 'maxcode[torch]'")
    if lazy and device == "cpu" and not compile_only:
        return None
    import torch

    if compile_only:
        if device == "cuda" and _nvcc() is None:
            raise MaxcodeError("--compile-only --device cuda needs nvcc (the CUDA toolkit)")
    elif device == "cuda" and not torch.cuda.is_available():
        hint = " (--compile-only checks that a CUDA candidate builds)" if _nvcc() else ""
        raise MaxcodeError(
            f"--device cuda: this machine has no CUDA GPU that PyTorch can use{hint}"
        )
    return torch


def resolve_device(device: str) -> str:
    """The device ``device`` names (``auto``: ``cuda`` when PyTorch sees a GPU)."""
    if device != "auto":
        return device
    if importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_note(device: str) -> str:
    """What ``--device auto`` chose, in words."""
    why = "PyTorch sees a GPU" if device == "cuda" else "no GPU that PyTorch can use"
    return f"device: {device} (auto: {why})"


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(path) for path in [Path("/usr/local/cuda/bin/nvcc")] if path.is_file()), None
    )


def needs_build(candidate: str) -> bool:
    """Whether importing the candidate compiles extensions (worth a build step of its own)."""
    return "cpp_extension" in candidate or "load_inline" in candidate


def check_backend(backend: str | None, device: str, compile_only: bool = False) -> None:
    """A clear error for a backend this device or this machine cannot serve."""
    if backend is None:
        return
    if backend not in BACKENDS:
        raise MaxcodeError(f"unknown backend {backend!r} ({' or '.join(BACKENDS)})")
    if backend == "cuda" and device != "cuda":
        raise MaxcodeError(
            "--backend cuda needs --device cuda (on a CPU, candidates are C++ extensions, "
            "and --backend triton runs in Triton's interpreter)"
        )
    if backend == "triton":
        if compile_only:
            raise MaxcodeError(
                "--compile-only builds load_inline extensions; a Triton candidate is checked "
                "by running it (on a CPU, in Triton's interpreter)"
            )
        if importlib.util.find_spec("triton") is None:
            raise MaxcodeError("--backend triton needs Triton: pip install 'maxcode[triton]'")


def launch_findings(report: WorkerReport) -> list[str]:
    """The ``backend`` findings of a Triton candidate's run ([] when it is a Triton result)."""
    try:
        launches = LaunchCount.model_validate(report.triton)
    except ValidationError:
        return ["no count of the forward's Triton launches came back"]
    found = []
    if not launches.intact:
        found.append("Triton's launch entry points were replaced: the launch count is void")
    silent = sum(1 for count in launches.checked if count <= 0)
    if not launches.checked or silent:
        total = len(launches.checked)
        other = f" ({launches.other} launches of kernels it does not define)" * (launches.other > 0)
        found.append(
            f"forward launched no Triton kernel in {silent} of {total} checked calls{other}: "
            "a Triton candidate must compute with its own @triton.jit kernels"
        )
    elif launches.timed is not None and launches.timed < launches.timed_calls:
        found.append(
            f"{launches.timed} Triton launches in {launches.timed_calls} timed calls: "
            "some timed forwards launched no Triton kernel"
        )
    return found


UNTIMED = "checked in Triton's interpreter on a CPU; Triton kernels are timed only on a GPU"
"""The ``interpreted`` finding of a correct Triton candidate on a CPU."""
