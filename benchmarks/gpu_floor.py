"""The fixed cost of one timed CUDA call, by how the call is timed: before and after, side by side.

Three ways of timing one call, each after the harness's L2 flush and a device-wide sync:

- ``sync-then-end`` (before): a device-wide sync inside the window, then the end event. Side
  streams count, and so does a host round trip in every call.
- ``worker`` (after): the worker's own ``timing.Timing._call``: events on the call's stream,
  plus the host's wait for the rest of the device after the end event.
- ``events-only`` (KernelBench's way, for scale): events on the stream, nothing else. Work left
  on a side stream is not seen.

Cases: a one-element add (the floor itself), elementwise work of 16 MiB and 256 MiB, and the
side-stream cheat fixture's model (ten matrix products on a stream of its own). Methods are
alternated in blocks so that drift hits each alike. Prints medians in microseconds and the
after/before ratio; ``--json`` writes them.

    python benchmarks/gpu_floor.py                # needs a CUDA GPU
    python benchmarks/gpu_floor.py --calls 400 --json floor.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SIDE_STREAM = REPO / "tests" / "fixtures" / "kernelbench" / "cheats" / "side_stream.py"


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per case and method")
    parser.add_argument("--block", type=int, default=20, help="calls per method before switching")
    parser.add_argument("--json", help="write the medians here")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_floor: no CUDA GPU here", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    from maxcode.kinds.kernelbench.worker.timing import Timing

    timing = Timing.__new__(Timing)
    timing.torch, timing.device, timing.cuda, timing.last = torch, device, True, None
    timing.sync = lambda: torch.cuda.synchronize(device)
    flush = torch.empty(64 << 20, dtype=torch.int32, device=device)

    def events(model: Any, given: list[Any], sync_inside: bool) -> float:
        """Events around the call on the current stream; ``sync_inside``: a device-wide sync
        before the end event (the worker's timing before), else only after it."""
        flush.zero_()
        torch.cuda.synchronize(device)
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        model(*given)
        if sync_inside:
            torch.cuda.synchronize(device)
        end.record()
        torch.cuda.synchronize(device)
        return float(begin.elapsed_time(end)) / 1000.0

    def sync_then_end(model: Any, given: list[Any]) -> float:
        return events(model, given, sync_inside=True)

    def events_only(model: Any, given: list[Any]) -> float:
        return events(model, given, sync_inside=False)

    def in_worker(model: Any, given: list[Any]) -> float:
        seconds = float(timing._call(model, given, flush))
        timing.last = None
        return seconds

    methods = {"sync-then-end": sync_then_end, "worker": in_worker, "events-only": events_only}
    side = _load(SIDE_STREAM, "side_stream_fixture")
    with torch.device(device):
        side_model = side.ModelNew(2048).to(device)
    cases: dict[str, tuple[Any, list[Any]]] = {
        "add 1 element": (lambda x: x + 1, [torch.ones(1, device=device)]),
        "gelu 16 MiB": (torch.nn.functional.gelu, [torch.randn(4 << 20, device=device)]),
        "gelu 256 MiB": (torch.nn.functional.gelu, [torch.randn(64 << 20, device=device)]),
        "side stream": (side_model, [torch.randn(4096, 2048, device=device)]),
    }
    results: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    with torch.no_grad():
        for name, (model, given) in cases.items():
            samples: dict[str, list[float]] = {method: [] for method in methods}
            for _ in range(5):
                for method in methods.values():
                    method(model, given)
            while min(len(times) for times in samples.values()) < args.calls:
                for method, timed in methods.items():
                    samples[method] += [timed(model, given) for _ in range(args.block)]
            results[name] = {
                method: statistics.median(times) * 1e6 for method, times in samples.items()
            }
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, {args.calls} calls")
    print(
        f"{'case':<16}" + "".join(f"{method:>16}" for method in methods) + f"{'after/before':>14}"
    )
    for name, medians in results.items():
        ratio = medians["worker"] / medians["sync-then-end"]
        cells = "".join(f"{medians[method]:>14.1f}us" for method in methods)
        print(f"{name:<16}{cells}{ratio:>14.3f}")
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
