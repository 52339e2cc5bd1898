"""The harness half that runs inside the sandbox for one KernelBench program (stdlib + torch).

It is started as ``python3 -I -B kernelbench_worker.py SPEC.json`` in a sandboxed process of its
own, once for the reference and once for the candidate, so the candidate can never patch the
reference's code or the functions that judge it. It imports no maxcode module: it is copied
next to the job's files and runs with the interpreter's own packages only.

What it writes (into its working folder) is *evidence*, not a verdict: the outputs of every
checked and timed call, the inputs after the call, and the in-process timings. The parent
compares outputs against the reference's with its own torch, checks inputs, and cross-checks
the timings against host time stamps it takes itself when this process writes a marker line
on descriptor 3. A candidate that patches anything in this process (the clock, ``allclose``,
this module) can at most lie about its own timings, which the host cross-check catches.

Roles:

- ``reference``: the problem's ``Model``; each check seed run twice (self-agreement); inputs
  before and after the call; timing of eager (and ``torch.compile`` when asked) over rotated
  inputs, and of an identity model (the harness's own overhead per call, for the cross-check).
- ``candidate``: the candidate's ``ModelNew`` (import = build of its extensions); each check
  seed run twice (determinism); inputs after the call; timing over the same rotated inputs.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# Bound before any candidate code runs: later patches of the modules do not reach these.
_perf_counter = time.perf_counter
_write = os.write
_MARKER_FD = 3
_MESSAGE_CHARS = 6000


def _mark(label: str) -> None:
    try:
        _write(_MARKER_FD, (label + "\n").encode())
    except OSError:
        pass


def _bounded(text: str, limit: int = _MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return (
        text[: limit // 2]
        + f"\n… ({len(text) - limit} characters skipped) …\n"
        + text[-limit // 2 :]
    )


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


class _Failure(Exception):
    def __init__(self, stage: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.detail = detail


def _load_module(name: str, path: str, overrides: dict[str, int]) -> Any:
    import types

    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    for key, value in overrides.items():
        if key in module.__dict__:
            module.__dict__[key] = value
    return module


def main(spec_path: str) -> int:
    os.umask(0)
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    result: dict[str, object] = {"stage": "ok", "role": spec["role"]}
    try:
        _run(spec, result)
    except _Failure as failure:
        result.update(stage=failure.stage, message=failure.message, detail=_bounded(failure.detail))
    except BaseException as error:
        result.update(
            stage="runtime_error",
            message=f"{type(error).__name__}: {error}"[:_MESSAGE_CHARS],
            detail=_bounded(traceback.format_exc()),
        )
    with open("result.json.tmp", "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace("result.json.tmp", "result.json")
    return 0


def _run(spec: dict[str, Any], result: dict[str, Any]) -> None:
    import torch

    device = torch.device(spec["device"])
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(1)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    overrides = spec["overrides"]
    try:
        problem = _load_module("maxcode_problem", spec["problem"], overrides)
    except BaseException as error:
        raise _Failure(
            "load_error", f"the problem file fails to load: {error}", traceback.format_exc()
        ) from None
    if spec["role"] == "reference":
        factory = problem.Model
    else:
        try:
            candidate = _load_module("maxcode_candidate", spec["candidate"], overrides)
        except SyntaxError as error:
            raise _Failure(
                "compile_error",
                f"candidate.py:{error.lineno}: syntax error: {error.msg}",
                traceback.format_exc(limit=0),
            ) from None
        except BaseException as error:
            message = f"{type(error).__name__}: {error}"
            raise _Failure(
                "compile_error", message, message + "\n" + traceback.format_exc(limit=-3)
            ) from None
        factory = getattr(candidate, "ModelNew", None)
        if factory is None:
            raise _Failure("compile_error", "the candidate defines no ModelNew class")
    get_inputs, get_init_inputs = problem.get_inputs, problem.get_init_inputs
    torch.manual_seed(spec["init_seed"])
    init_inputs = get_init_inputs()
    torch.manual_seed(spec["init_seed"])
    try:
        model = factory(*init_inputs)
        model = model.to(device).eval() if isinstance(model, torch.nn.Module) else model
    except BaseException as error:
        raise _Failure(
            "init_error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-4)
        ) from None

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def make_inputs(seed: int) -> list:
        torch.manual_seed(seed)
        return [
            value.to(device) if isinstance(value, torch.Tensor) else value for value in get_inputs()
        ]

    def fresh(inputs: list) -> list:
        return [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]

    def flat(output: object, where: str) -> list:
        values = list(output) if isinstance(output, (tuple, list)) else [output]
        for position, value in enumerate(values):
            if type(value) is not torch.Tensor:
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                raise _Failure(
                    "runtime_error",
                    f"{where}: output {position} is a {kind}, not a plain torch.Tensor",
                )
        return values

    def aliases(outputs: list, inputs: list) -> bool:
        pointers = {
            value.untyped_storage().data_ptr()
            for value in inputs
            if isinstance(value, torch.Tensor) and value.numel()
        }
        return any(out.numel() and out.untyped_storage().data_ptr() in pointers for out in outputs)

    def to_cpu(values: list) -> list:
        return [value.detach().to("cpu").clone() for value in values]

    saved: dict[str, list] = {"check": [], "again": [], "before": [], "after": []}
    aliased = []
    with torch.no_grad():
        for number, seed in enumerate(spec["check_seeds"]):
            inputs = make_inputs(seed)
            saved["before"].append(to_cpu([v for v in inputs if isinstance(v, torch.Tensor)]))
            given = fresh(inputs)
            first = flat(model(*given), f"seed {number}")
            sync()
            if aliases(first, given):
                aliased.append(number)
            saved["check"].append(to_cpu(first))
            saved["after"].append(to_cpu([v for v in given if isinstance(v, torch.Tensor)]))
            second = flat(model(*fresh(inputs)), f"seed {number}, second run")
            sync()
            saved["again"].append(to_cpu(second))
        result["aliased"] = aliased
        pool = [make_inputs(seed) for seed in spec["pool_seeds"]]
        result["threads_before"] = _threads()
        result["torch_threads_before"] = torch.get_num_threads()
        times: dict[str, list[float]] = {}
        timed_outputs: list = []
        label = "eager" if spec["role"] == "reference" else "candidate"
        times[label] = _timed(torch, model, pool, spec, device, "K", timed_outputs, sync, fresh)
        result["threads_after"] = _threads()
        result["torch_threads_after"] = torch.get_num_threads()
        saved["timed"] = [to_cpu(flat(out, "timed call")) for out in timed_outputs]
        if spec["role"] == "reference":
            times["overhead"] = _timed(
                torch, lambda *xs: xs[0], pool, spec, device, "O", [], sync, fresh
            )
            if spec.get("compile_baseline"):
                compiled = torch.compile(model)
                times["compile"] = _timed(torch, compiled, pool, spec, device, "C", [], sync, fresh)
    result["times"] = times
    torch.save(saved, "tensors.pt")


def _timed(
    torch: Any,
    model: Callable[..., Any],
    pool: list[list[Any]],
    spec: dict[str, Any],
    device: Any,
    marker: str,
    kept: list[Any],
    sync: Callable[[], None],
    fresh: Callable[[list[Any]], list[Any]],
) -> list[float]:
    """Median-ready samples of one callable over rotated, freshly copied inputs.

    Warm-up first (also sizes the trial count to the time budget); then each trial copies the
    next input set into new storage (no pointer-keyed cache can hit), flushes the L2 cache on
    CUDA, and times the call with a device-wide sync before the end event. The outputs of the
    last call on each input set are kept for the parent to re-check.
    """
    cuda = device.type == "cuda"
    flush = torch.empty(64 << 20, dtype=torch.int32, device=device) if cuda else None
    estimate = 0.0
    for number in range(spec["warmup"]):
        given = fresh(pool[number % len(pool)])
        sync()
        start = _perf_counter()
        model(*given)
        sync()
        estimate = _perf_counter() - start
    trials = spec["min_trials"]
    if estimate > 0:
        trials = max(spec["min_trials"], min(spec["max_trials"], int(spec["budget_s"] / estimate)))
    trials = max(trials, len(pool))
    samples = []
    last = {}
    _mark(marker + "0")
    for number in range(trials):
        given = fresh(pool[number % len(pool)])
        if flush is not None:
            flush.zero_()
            sync()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            output = model(*given)
            torch.cuda.synchronize(device)
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end) / 1000.0)
        else:
            start = _perf_counter()
            output = model(*given)
            samples.append(_perf_counter() - start)
        last[number % len(pool)] = output
    _mark(marker + "1")
    kept.extend(last[index] for index in range(len(pool)))
    return samples


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
