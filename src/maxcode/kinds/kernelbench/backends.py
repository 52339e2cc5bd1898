"""Kernel languages of KernelBench candidates: ``cuda`` (``load_inline``), ``triton``
(``@triton.jit``) and ``cpp`` (C++ extensions on a CPU).

A Triton candidate is imported from its file (Triton reads a kernel's source back from it),
with the Triton cache in the candidate's own build folder. On a GPU it is checked and timed
like any other; on a CPU its kernels run in Triton's interpreter (``TRITON_INTERPRET=1``),
which says whether they are right but nothing about their speed: the result is checked, not
timed, and earns no reward (an ``interpreted`` warning says so).

The worker counts the launches of the candidate's own kernels (``launches.TritonLaunches``); a
forward that launches none of them is not a Triton result, whatever it computes: a ``backend``
finding voids it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from maxcode.errors import MaxcodeError

BACKENDS: tuple[str, ...] = ("cuda", "triton")
"""What ``--backend`` accepts; without it, ``cuda`` on a GPU and ``cpp`` on a CPU."""


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


class TritonLaunches(BaseModel):
    """What the worker counted of a Triton candidate's kernel launches."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    checked: list[int]
    """Launches of the candidate's own kernels in each checked forward."""
    timed: int | None
    """Launches over all timed calls (None when nothing was timed)."""
    timed_calls: int
    """The timed calls."""
    other: int = 0
    """Launches of kernels the candidate's file does not define."""
    intact: bool
    """Whether the counting wrappers were still Triton's entry points at the end."""


def launch_findings(report: Any) -> list[str]:
    """Why a Triton candidate's run is not a Triton result ([] when it is one): the messages
    of ``backend`` findings, from the launches its worker counted."""
    try:
        launches = TritonLaunches.model_validate(getattr(report, "triton", None))
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


__all__ = [
    "BACKENDS",
    "UNTIMED",
    "TritonLaunches",
    "check_backend",
    "launch_findings",
]
