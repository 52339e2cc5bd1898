"""One worker run: the model built, warmed up, checked on the parent's seeds, timed chunk by
chunk in turn with the other side (``timing``); a report left in ``result.json``."""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from .build import compile_check, light_cuda_builds, load_module
from .channel import Channel, Failure, Pack, perf_counter, staging
from .launches import TritonLaunches
from .layout import pin
from .probes import forward_profile, forward_under_nvtx, roofline
from .protocol import Phase, WorkerSpec
from .timing import Timing, reserve

_MESSAGE_CHARS = 6000


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


def main(spec_path: str) -> int:
    os.umask(0)
    result: dict[str, object] = {"stage": "ok", "role": "unknown"}
    try:
        with open(spec_path, encoding="utf-8") as handle:
            spec = WorkerSpec.loads(handle.read())
        result["role"] = spec.role
        _run(spec, result)
    except Failure as failure:
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
    # Everything is written: skip the interpreter's teardown (most of a second with torch).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(spec: WorkerSpec, result: dict[str, Any]) -> None:
    if spec.role == "compile_check":
        compile_check(spec, result)
        return
    stages = _Stages(result)
    triton = spec.backend == "triton" and spec.role != "reference"
    launches = TritonLaunches.install(spec) if triton else None
    import torch

    pin()
    stages.done("torch")
    # Output containers read as stored: exact lists, tuples and torch's named tuples, taken
    # before a candidate loads (their classes can be patched).
    sequences = (list, tuple, *_named_tuples(torch))

    device = torch.device(spec.device)
    if device.type == "cuda" and device.index is None:
        # set_device and synchronize want an index; "cuda" means the first visible device.
        device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(1)
    device_sync = None
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # The device-wide wait the parent's stamps rely on, bound before the candidate loads.
        device_sync = torch._C._cuda_synchronize
    overrides = spec.overrides
    try:
        problem = load_module("maxcode_problem", spec.problem, overrides)
    except BaseException as error:
        raise Failure(
            "load_error", f"the problem file fails to load: {error}", traceback.format_exc()
        ) from None
    if spec.role == "reference":
        factory = problem.Model
        stages.done("load")
    else:
        if device.type == "cuda":
            light_cuda_builds()
        try:
            candidate = load_module("maxcode_candidate", spec.candidate, overrides)
        except SyntaxError as error:
            raise Failure(
                "compile_error",
                f"candidate.py:{error.lineno}: syntax error: {error.msg}",
                traceback.format_exc(limit=0),
            ) from None
        except BaseException as error:
            message = f"{type(error).__name__}: {error}"
            raise Failure(
                "compile_error", message, message + "\n" + traceback.format_exc(limit=-3)
            ) from None
        if spec.role == "build":
            # Importing built the extensions into the cache; the evaluation will load them.
            return
        factory = getattr(candidate, "ModelNew", None)
        if factory is None:
            raise Failure("compile_error", "the candidate defines no ModelNew class")
        stages.done("load")
    get_inputs, get_init_inputs = problem.get_inputs, problem.get_init_inputs
    torch.manual_seed(spec.init_seed)
    init_inputs = get_init_inputs()
    torch.manual_seed(spec.init_seed)
    try:
        model = factory(*init_inputs)
        model = model.to(device).eval() if isinstance(model, torch.nn.Module) else model
    except BaseException as error:
        raise Failure(
            "init_error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-4)
        ) from None

    def sync() -> None:
        if device_sync is not None:
            device_sync()

    def make_inputs(seed: int) -> list:
        torch.manual_seed(seed)
        # Made on the device: every timed call gets fresh inputs, and making them on the host
        # would cost far more than a kernel's call.
        with device:
            made = get_inputs()
        return [value.to(device) if isinstance(value, torch.Tensor) else value for value in made]

    def fresh(inputs: list) -> list:
        return [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]

    def flat(output: object, where: str) -> list:
        # By exact type, read through the base class: a subclass could run code when iterated.
        values = _items(output) if type(output) in sequences else [output]
        for position, value in enumerate(values):
            if type(value) is not torch.Tensor:
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                raise Failure(
                    "runtime_error",
                    f"{where}: output {position} is a {kind}, not a plain torch.Tensor",
                )
        return values

    def unchanged(made: list, after: list) -> bool:
        """The call left its inputs as they were made (NaN equal to NaN)."""
        return len(made) == len(after) and all(
            a.dtype == b.dtype
            and a.shape == b.shape
            and (
                torch.equal(a, b)
                or (a.is_floating_point() and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
            )
            for a, b in zip(made, after)
        )

    def aliases(outputs: list, inputs: list) -> bool:
        pointers = {
            value.untyped_storage().data_ptr()
            for value in inputs
            if isinstance(value, torch.Tensor) and value.numel()
        }
        return any(out.numel() and out.untyped_storage().data_ptr() in pointers for out in outputs)

    if spec.role == "kernels":
        forward_under_nvtx(torch, model, make_inputs(spec.warmup_seeds[0]), fresh, sync)
        return
    channel = Channel()
    # On a GPU, outputs reach the memory files through pinned host memory, a piece at a time.
    staged = staging(torch, device)
    timing = Timing(
        torch,
        spec,
        device,
        make_inputs,
        sync,
        lambda out: flat(out, "timed call"),
        channel,
        staged,
    )
    aliased: list[int] = []
    checked = model if launches is None else launches.per_call(model)
    with torch.no_grad():
        # Warm-up on inputs of its own seeds; untimed (Triton interpreted): none.
        stages.done("model")
        estimate, output_bytes, input_bytes, inputs_s = (
            timing.warm_up(model) if spec.timed else (0.0, 0, 0, 0.0)
        )
        stages.done("warmup")
        plan = channel.ask(
            {
                "m": "ready",
                "estimate_s": estimate,
                "output_bytes": output_bytes,
                "input_bytes": input_bytes,
                "inputs_s": inputs_s,
            }
        )
        check_seeds = [int(seed) for seed in plan["check"]]
        for number, seed in enumerate(check_seeds):
            inputs = make_inputs(seed)
            given = fresh(inputs)
            first = flat(checked(*given), f"seed {number}")
            sync()
            if aliases(first, given):
                aliased.append(number)
            # Outputs copied out as each call returns, so a later call reusing their buffer
            # cannot change them; inputs after the call only when it changed them.
            pack = Pack(torch, staged, spec.segment_bytes)
            items = [{"key": "check", "seed": number, "tensors": pack.add(first)}]
            del first
            after = [v for v in given if isinstance(v, torch.Tensor)]
            made = [v for v in inputs if isinstance(v, torch.Tensor)]
            changed = [] if unchanged(made, after) else after
            items.append({"key": "after", "seed": number, "tensors": pack.add(changed)})
            del given, after, changed
            second = flat(checked(*fresh(inputs)), f"seed {number}, second run")
            sync()
            items.append({"key": "again", "seed": number, "tensors": pack.add(second)})
            del second, inputs
            pack.send(channel, {"m": "checked", "seed": number, "items": items})
        result["aliased"] = aliased
        stages.done("checks")
        if not spec.timed:
            if launches is not None:
                result["triton"] = launches.report(None, 0)
            result["times"] = {}
            return
        # On a GPU the timed calls' tensors do not grow the host's heap.
        if device.type == "cpu":
            reserve(torch, spec, output_bytes + input_bytes)
        result["threads_before"] = _threads()
        result["torch_threads_before"] = torch.get_num_threads()
        times: dict[str, list[float]] = {}
        label = "eager" if spec.role == "reference" else "candidate"
        launched_before = launches.total() if launches is not None else 0
        times[label] = timing.run(model, Phase.PAIRS)
        stages.done("timed")
        if launches is not None:
            timed_calls = len(times[label])
            result["triton"] = launches.report(launches.total() - launched_before, timed_calls)
        result["threads_after"] = _threads()
        result["torch_threads_after"] = torch.get_num_threads()
        if spec.profile:
            started = perf_counter()
            given = [make_inputs(seed) for seed in spec.warmup_seeds]
            result["profile"] = forward_profile(torch, model, given, sync)
            result["profile_seconds"] = perf_counter() - started
        if spec.role == "reference":
            # The harness's own cost per call: the same loop around an identity model, which
            # reads nothing of its inputs, so one input set serves it and the roofline.
            identity = lambda *xs: xs[0]  # noqa: E731
            baseline_inputs = make_inputs(spec.warmup_seeds[0])
            timing.warm_up(identity, baseline_inputs)
            times["overhead"] = timing.run(identity, Phase.IDENTITY, one_input_set=baseline_inputs)
            if spec.compile_baseline:
                compiled = torch.compile(model)
                timing.warm_up(compiled)
                times["compile"] = timing.run(compiled, Phase.COMPILE)
            if spec.roofline:  # the parent keeps a measurement per task
                try:
                    result["roofline"] = roofline(torch, model, baseline_inputs, device, sync)
                except Exception as error:  # informational: never costs the task its reference
                    message = f"{type(error).__name__}: {error}"
                    result["roofline_error"] = message[:_MESSAGE_CHARS]
    stages.done("baselines")
    result["times"] = times


class _Stages:
    """Seconds of the worker's stages by its own clock (informational, see the report)."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.seconds: dict[str, float] = {}
        result["stages"] = self.seconds
        self.last = perf_counter()

    def done(self, stage: str) -> None:
        now = perf_counter()
        self.seconds[stage] = now - self.last
        self.last = now


def _named_tuples(torch: Any) -> list[type]:
    """torch's named tuples (``torch.return_types``), which outputs may be."""
    found = vars(getattr(torch, "return_types", object())).values()
    return [kind for kind in found if isinstance(kind, type) and issubclass(kind, tuple)]


def _items(sequence: Any) -> list[Any]:
    """The items a list or tuple stores, read by the base type's own slots."""
    base: Any = list if isinstance(sequence, list) else tuple
    return [base.__getitem__(sequence, index) for index in range(base.__len__(sequence))]
