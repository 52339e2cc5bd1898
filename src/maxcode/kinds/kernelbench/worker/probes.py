"""What the worker measures beside the timing, none of it judged: the reference's roofline
(its work and this device's rates), one forward under ``torch.profiler``, one forward under
an NVTX range for Nsight Compute."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .conversation import perf_counter
from .protocol import NVTX_RANGE


def forward_under_nvtx(
    torch: Any, model: Any, inputs: list[Any], fresh: Callable[[list], list], sync: Callable
) -> None:
    """Two warm-up forwards (lazy initialisation, autotuning), then one inside the NVTX range
    that ncu is told to profile: the kernels of one steady-state forward."""
    with torch.no_grad():
        for _ in range(2):
            model(*fresh(inputs))
            sync()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        model(*fresh(inputs))
        sync()
        torch.cuda.nvtx.range_pop()


def roofline(torch: Any, model: Any, inputs: list[Any], device: Any, sync: Callable) -> dict:
    """The reference's work (FLOPs of matrix products and convolutions; bytes of inputs,
    parameters and outputs, each once) and this device's measured rates for it."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        output = model(*inputs)
    sync()
    outputs = output if isinstance(output, (tuple, list)) else [output]
    state: dict[int, Any] = {}
    if isinstance(model, torch.nn.Module):
        for tensor in [*model.parameters(), *model.buffers()]:
            state.setdefault(tensor.data_ptr(), tensor)
    counted = [
        value for value in [*inputs, *state.values(), *outputs] if isinstance(value, torch.Tensor)
    ]
    moved = sum(value.numel() * value.element_size() for value in counted)
    floating = [value for value in counted if value.is_floating_point()]
    dtype = max(floating, key=lambda v: v.numel() * v.element_size()).dtype if floating else None
    return {
        "flops": int(counter.get_total_flops()),
        "bytes": int(moved),
        "flop_rate": _matmul_rate(torch, device, dtype or torch.float32, sync),
        "byte_rate": _byte_rate(torch, device, sync, moved),
    }


def _best_seconds(work: Callable[[], object], sync: Callable, repeats: int = 3) -> float:
    work()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = perf_counter()
        work()
        sync()
        best = min(best, perf_counter() - start)
    return max(best, 1e-9)


def _matmul_rate(torch: Any, device: Any, dtype: Any, sync: Callable) -> float:
    """FLOP/s of a large square matrix product in ``dtype`` (TF32 stays off, as in timing)."""
    size = 4096 if device.type == "cuda" else 1024
    try:
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        seconds = _best_seconds(lambda: torch.mm(a, b), sync)
    except RuntimeError:  # a dtype without a matrix product here
        return 0.0
    return 2.0 * size**3 / seconds


def _byte_rate(torch: Any, device: Any, sync: Callable, moved: int) -> float:
    """Bytes/s of the better of a copy and a sum: over 512 MiB on a GPU (the timed calls flush
    L2), over the task's own size on a CPU (1 to 128 MiB, where fresh inputs sit in caches)."""
    size = 512 << 20 if device.type == "cuda" else min(max(moved, 1 << 20), 128 << 20)
    buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
    copy = _best_seconds(lambda: buffer.clone(), sync)
    read = _best_seconds(lambda: buffer.sum(), sync)
    return max(2.0 * size / copy, size / read)


_TOP_OPERATORS = 8

OWN_CODE = "(own code outside PyTorch operators)"
"""On a CPU, the profile's entry for time in no PyTorch operator (a C++ extension's function):
the forwards timed without the profiler (each the least of a few), less their top-level
operators' time under it."""


_PLAIN_TRIES = 5


def _least_us(model: Callable[..., Any], given: list[Any]) -> float:
    """One forward's least time out of a few, in microseconds: a moment the process was not
    scheduled would otherwise be counted as the model's own code."""
    least = float("inf")
    for _ in range(_PLAIN_TRIES):
        start = perf_counter()
        model(*given)
        least = min(least, perf_counter() - start)
    return least * 1e6


def forward_profile(
    torch: Any, model: Callable[..., Any], inputs: list[list[Any]], sync: Callable[[], None]
) -> dict[str, Any]:
    """Where one forward's time goes (``torch.profiler``): the top operators or kernels by
    their own time, launches and bytes allocated per call (for the critic, never the reward)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile

    cuda = any(
        isinstance(value, torch.Tensor) and value.is_cuda for values in inputs for value in values
    )
    calls = len(inputs)
    # The profiler beneath torch.profiler.profile, whose wrapper imports torch._inductor.
    with profile(
        use_cpu=True, use_device="cuda" if cuda else None, profile_memory=True, use_kineto=True
    ) as prof:
        for given in inputs:
            model(*given)
        sync()
    averages = prof.key_averages()
    unrecorded = 0.0
    if cuda:

        def own_time(event: Any) -> float:
            return float(getattr(event, "self_device_time_total", 0.0))

        kernels = [e for e in prof.function_events if e.device_type == DeviceType.CUDA]
        launches = len(kernels) / calls
        allocated = sum(max(0, getattr(e, "self_device_memory_usage", 0)) for e in averages)
    else:

        def own_time(event: Any) -> float:
            return float(event.self_cpu_time_total)

        top_level = [
            e for e in prof.function_events if e.cpu_parent is None and e.key.startswith("aten::")
        ]
        launches = len(top_level) / calls
        allocated = sum(max(0, e.self_cpu_memory_usage) for e in averages)
        plain_us = sum(_least_us(model, given) for given in inputs)
        unrecorded = max(0.0, plain_us - sum(float(e.cpu_time_total) for e in top_level))
    busy = [event for event in averages if own_time(event) > 0]
    total = sum(own_time(event) for event in busy) + unrecorded or 1.0
    top = [
        {"name": e.key[:80], "share": own_time(e) / total, "calls": e.count / calls} for e in busy
    ]
    if unrecorded > 0:
        top.append({"name": OWN_CODE, "share": unrecorded / total, "calls": 1.0})
    return {
        "clock": "cuda" if cuda else "cpu",
        "top": sorted(top, key=lambda entry: entry["share"], reverse=True)[:_TOP_OPERATORS],
        "launches": launches,
        "allocated_bytes": int(allocated / calls),
    }
