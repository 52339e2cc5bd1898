"""The child process of ``maxcode regions``: a model's forward run with every module timed, its
calls recorded (what each module is given and returns) and the operators each runs.

It runs the user's model, in a process of its own, and prints one JSON object: ``forward_s``
(the forward's least seconds) and ``modules``, one per module the forward called (``path``
as ``named_modules`` names it, "" for the model; ``type``; ``sequential``: a plain
``nn.Sequential``, whose children feed each other in order; ``seconds``: least inclusive
seconds per forward over the timed repeats (least, not median: a module's least is at most its
share of the forward's least); ``times``: those of each timed forward; ``calls`` per
forward; ``children``; ``inputs`` and ``outputs`` (flat) of its first call, described by
``describe`` (an argument that is the very tensor of an earlier one: ``{"same_as": index}``),
``returns``: what it returned, nested as it was, and ``aliases``: whether a result shares
memory with an argument;
``operators``: the aten operators it ran, inclusive, in order of first use, with their counts).
The forward runs on one thread on a CPU, as ``maxcode eval`` times it.

    python -m maxcode.regions.probe PROBLEM.py DEVICE REPEATS
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from typing import Any

_SEED = 0


def main(argv: list[str]) -> int:
    import torch

    path, device, repeats = argv[1], argv[2], int(argv[3])
    if device == "cpu":
        torch.set_num_threads(1)  # as maxcode eval times a CPU forward: shares it will see
    problem = _load(path)
    torch.manual_seed(_SEED)
    model = problem.Model(*problem.get_init_inputs()).to(device)
    torch.manual_seed(_SEED + 1)
    inputs = [_to(value, device) for value in problem.get_inputs()]
    probe = _Probe(model, device)
    with torch.no_grad():
        probe.record_operators(inputs)
        model(*inputs)  # warm
        for _ in range(repeats):
            probe.time_forward(inputs)
        report = probe.report()
        report["hook_s"] = hook_seconds(torch, device)
    print(json.dumps(report))
    return 0


def hook_seconds(torch: Any, device: str, calls: int = 500, tries: int = 5) -> float:
    """What the probe's hooks add to one module call (least over ``tries`` of ``calls``): a
    module's time holds its submodules' hooks, the caller takes them off."""
    plain, hooked = torch.nn.Identity(), torch.nn.Identity()
    _Probe(hooked, device)
    value = torch.zeros(1, device=device)

    def least(module: Any) -> float:
        best = float("inf")
        for _ in range(tries):
            start = time.perf_counter()
            for _ in range(calls):
                module(value)
            best = min(best, (time.perf_counter() - start) / calls)
        return best

    return max(0.0, least(hooked) - least(plain))


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("maxcode_regions_problem", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _to(value: Any, device: str) -> Any:
    return value.to(device) if hasattr(value, "to") else value


class _Probe:
    """Hooks on every module of ``model``: a stack of the modules running, their inclusive
    seconds per forward, and their first call's arguments and results."""

    def __init__(self, model: Any, device: str) -> None:
        import torch

        self.model, self.torch = model, torch
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.paths = {id(module): name for name, module in model.named_modules()}
        self.children = {
            name: [f"{name}.{child}" if name else child for child, _ in module.named_children()]
            for name, module in model.named_modules()
        }
        self.types = {name: type(module).__name__ for name, module in model.named_modules()}
        self.sequential = {
            name for name, module in model.named_modules() if type(module) is torch.nn.Sequential
        }
        self.stack: list[tuple[str, float]] = []
        self.spent: dict[str, float] = {}
        self.counted: dict[str, int] = {}
        self.per_forward: dict[str, list[float]] = {}
        self.calls: dict[str, int] = {}
        self.given: dict[str, dict[str, Any]] = {}
        self.operators: dict[str, dict[str, int]] = {}
        self.recording = False
        """While operators are recorded (values are described on a later forward: describing
        one runs operators of its own)."""
        for module in model.modules():
            module.register_forward_pre_hook(self._enter, with_kwargs=True)
            module.register_forward_hook(self._leave, with_kwargs=True)

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        path = self.paths.get(id(module), "?")
        if path not in self.given and not self.recording:
            self.given[path] = {
                "args": [
                    {"same_as": earlier}
                    if (earlier := _first_same(args, index)) is not None
                    else describe(value)
                    for index, value in enumerate(args)
                ],
                "kwargs": {key: describe(value) for key, value in kwargs.items()},
            }
        self.sync()
        self.stack.append((path, time.perf_counter()))

    def _leave(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        self.sync()
        path, started = self.stack.pop()
        self.spent[path] = self.spent.get(path, 0.0) + time.perf_counter() - started
        self.counted[path] = self.counted.get(path, 0) + 1
        given = self.given.get(path)
        if given is not None and "outputs" not in given:
            given["outputs"] = [describe(value) for value in _flat(output)]
            given["returns"] = describe(output)
            given["aliases"] = _aliases(args, kwargs, output)

    def time_forward(self, inputs: list[Any]) -> None:
        self.spent, self.counted = {}, {}
        self.model(*inputs)
        for path, seconds in self.spent.items():
            self.per_forward.setdefault(path, []).append(seconds)
            self.calls[path] = self.counted[path]

    def record_operators(self, inputs: list[Any]) -> None:
        """One forward under a dispatch mode that charges each aten operator to every module
        running at the time."""
        from torch.utils._python_dispatch import TorchDispatchMode

        probe = self

        class Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                name = func.overloadpacket.__name__
                for path, _ in probe.stack:
                    counts = probe.operators.setdefault(path, {})
                    counts[name] = counts.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.recording = True
        try:
            with Recorder():
                self.model(*inputs)
        finally:
            self.recording = False
        self.stack.clear()

    def report(self) -> dict[str, Any]:
        modules = []
        for path, times in self.per_forward.items():
            given = self.given.get(path, {})
            modules.append(
                {
                    "path": path,
                    "type": self.types.get(path, "?"),
                    "sequential": path in self.sequential,
                    "seconds": min(times),
                    "times": times,
                    "calls": self.calls.get(path, 0),
                    "children": self.children.get(path, []),
                    "inputs": given.get("args", []),
                    "kwargs": given.get("kwargs", {}),
                    "outputs": given.get("outputs", []),
                    "returns": given.get("returns", {}),
                    "aliases": given.get("aliases", False),
                    "operators": self.operators.get(path, {}),
                }
            )
        forward = min(self.per_forward.get("", [0.0]))
        return {"forward_s": forward, "modules": modules, "tree": self.children}


def describe(value: Any) -> dict[str, Any]:
    """What a region's problem needs to make such a value again: a tensor's shape, dtype,
    layout and (integers, booleans) range; a plain value's ``repr``."""
    import torch

    if isinstance(value, torch.Tensor):
        described: dict[str, Any] = {
            "tensor": list(value.shape),
            "dtype": str(value.dtype).removeprefix("torch."),
            "contiguous": value.is_contiguous(),
        }
        if value.numel() and (value.dtype == torch.bool or not value.is_floating_point()):
            as_int = value.to(torch.int64)
            described["low"], described["high"] = int(as_int.min()), int(as_int.max())
            if value.dtype == torch.bool:
                described["density"] = float(value.float().mean())
        return described
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": repr(value)}
    if isinstance(value, (tuple, list)):
        items = [describe(item) for item in value]
        if all("value" in item for item in items):
            return {"value": repr(value)}
        return {"tuple" if isinstance(value, tuple) else "list": items}
    return {"other": type(value).__name__}


def _aliases(args: Any, kwargs: dict[str, Any], output: Any) -> bool:
    """Whether a result shares memory with an argument (an in-place module, a view)."""
    import torch

    def storages(values: list[Any]) -> set[int]:
        return {
            value.untyped_storage().data_ptr()
            for value in values
            if isinstance(value, torch.Tensor) and value.numel()
        }

    given = storages(_flat(list(args)) + _flat(list(kwargs.values())))
    return bool(given & storages(_flat(output)))


def _first_same(args: tuple[Any, ...], index: int) -> int | None:
    """The first argument before ``index`` that is the very tensor at ``index`` (self-attention
    given ``x, x, x``): a region's problem passes one tensor there too."""
    import torch

    value = args[index]
    if not isinstance(value, torch.Tensor):
        return None
    return next((earlier for earlier in range(index) if args[earlier] is value), None)


def _flat(output: Any) -> list[Any]:
    if isinstance(output, (tuple, list)):
        return [leaf for item in output for leaf in _flat(item)]
    return [output]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
