"""One worker run of a role (``WorkerSpec.role``): the model built, warmed up, checked on the
parent's seeds, timed chunk by chunk in turn with the other side (``timing``); a report left in
``result.json``."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .conversation import Channel, Failure, TensorParcel, perf_counter, staging
from .extensions import compile_check, header_fallback, light_cuda_builds, load_module
from .launches import LaunchCounter
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
    # Skip the interpreter's teardown (most of a second with torch).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(spec: WorkerSpec, result: dict[str, Any]) -> None:
    """The run ``spec.role`` asks for, its report filled in ``result`` as it goes."""
    if spec.role == "compile_check":
        compile_check(spec, result)
        return
    stages = _Stages(result)
    triton = spec.backend == "triton" and spec.role != "reference"
    launches = LaunchCounter.install(spec) if triton else None
    import torch

    stages.done("torch")
    channel = None
    if spec.role in ("reference", "candidate"):
        # Before anything of the task loads, the parent moves this process to the one CPU its
        # work runs on (it cannot move itself: the sandbox forbids it).
        channel = Channel()
        channel.ask({"m": "loaded"})
    calls = _Calls(torch, spec.device)
    problem = _load_problem(spec)
    if spec.role == "reference":
        factory = problem.Model
    else:
        factory = _load_candidate(spec, calls.device)
        if factory is None:  # build: importing built the extensions into the cache
            return
    stages.done("load")
    model = _build_model(spec, calls, problem, factory)
    if spec.role == "kernels":
        inputs = calls.make_inputs(spec.warmup_seeds[0])
        forward_under_nvtx(torch, model, inputs, calls.fresh, calls.sync)
        return
    with torch.no_grad():
        stages.done("model")
        _Session(spec, result, stages, calls, launches, channel or Channel()).run(model)


def _load_problem(spec: WorkerSpec) -> Any:
    try:
        return load_module("maxcode_problem", spec.problem, spec.overrides)
    except BaseException as error:
        raise Failure(
            "load_error", f"the problem file fails to load: {error}", traceback.format_exc()
        ) from None


def _load_candidate(spec: WorkerSpec, device: Any) -> Any:
    """The candidate's ``ModelNew``, its import the build of its extensions (None: ``build``)."""
    if device.type == "cuda":
        light_cuda_builds()
    header_fallback()
    try:
        candidate = load_module("maxcode_candidate", spec.candidate, spec.overrides)
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
        return None
    factory = getattr(candidate, "ModelNew", None)
    if factory is None:
        raise Failure("compile_error", "the candidate defines no ModelNew class")
    return factory


def _build_model(spec: WorkerSpec, calls: _Calls, problem: Any, factory: Any) -> Any:
    """The model built on ``spec.init_seed``, on the device; ``get_inputs`` taken only now,
    once the candidate is imported."""
    torch = calls.torch
    calls.get_inputs = problem.get_inputs
    torch.manual_seed(spec.init_seed)
    init_inputs = problem.get_init_inputs()
    torch.manual_seed(spec.init_seed)
    try:
        model = factory(*init_inputs)
        return model.to(calls.device).eval() if isinstance(model, torch.nn.Module) else model
    except BaseException as error:
        raise Failure(
            "init_error", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-4)
        ) from None


class _Session:
    """A built model's session with the parent over descriptor 3, its measures into ``result``."""

    def __init__(
        self,
        spec: WorkerSpec,
        result: dict[str, Any],
        stages: _Stages,
        calls: _Calls,
        launches: LaunchCounter | None,
        channel: Channel,
    ) -> None:
        self.spec, self.result, self.stages, self.calls = spec, result, stages, calls
        self.launches = launches
        self.channel = channel
        self.staged = staging(calls.torch, calls.device)
        timed_outputs = lambda out: calls.flat(out, "timed call")  # noqa: E731
        self.timing = Timing(
            calls.torch,
            spec,
            calls.device,
            calls.make_inputs,
            calls.sync,
            timed_outputs,
            self.channel,
            self.staged,
        )

    def run(self, model: Any) -> None:
        spec, result, stages, launches = self.spec, self.result, self.stages, self.launches
        estimate, output_bytes, input_bytes, inputs_s = (
            self.timing.warm_up(model) if spec.timed else (0.0, 0, 0, 0.0)
        )
        stages.done("warmup")
        ready = {"estimate_s": estimate, "output_bytes": output_bytes, "input_bytes": input_bytes}
        plan = self.channel.ask({"m": "ready", **ready, "inputs_s": inputs_s})
        checked = model if launches is None else launches.per_call(model)
        result["aliased"] = self.answer_checks(checked, [int(seed) for seed in plan["check"]])
        stages.done("checks")
        if not spec.timed:
            if launches is not None:
                result["triton"] = launches.report(None, 0)
            result["times"] = {}
            return
        times = self.time_pairs(model, output_bytes + input_bytes)
        if spec.profile:
            started = perf_counter()
            given = [self.calls.make_inputs(seed) for seed in spec.warmup_seeds]
            result["profile"] = forward_profile(self.calls.torch, model, given, self.calls.sync)
            result["profile_seconds"] = perf_counter() - started
        if spec.role == "reference":
            self.time_baselines(model, times)
        stages.done("baselines")
        result["times"] = times

    def answer_checks(self, model: Callable[..., Any], seeds: list[int]) -> list[int]:
        """A ``checked`` message per check seed (two runs on fresh copies of its inputs, the
        inputs the first changed); returns the seeds whose outputs alias an input."""
        calls, torch = self.calls, self.calls.torch
        aliased: list[int] = []
        for number, seed in enumerate(seeds):
            inputs = calls.make_inputs(seed)
            given = calls.fresh(inputs)
            first = calls.flat(model(*given), f"seed {number}")
            calls.sync()
            if calls.aliases(first, given):
                aliased.append(number)
            # Copied out as each call returns: a later call reusing their buffer cannot change them.
            parcel = TensorParcel(torch, self.staged, self.spec.segment_bytes)
            items = [{"key": "check", "seed": number, "tensors": parcel.add(first)}]
            del first
            after = [v for v in given if isinstance(v, torch.Tensor)]
            made = [v for v in inputs if isinstance(v, torch.Tensor)]
            changed = [] if calls.unchanged(made, after) else after
            items.append({"key": "after", "seed": number, "tensors": parcel.add(changed)})
            del given, after, changed
            second = calls.flat(model(*calls.fresh(inputs)), f"seed {number}, second run")
            calls.sync()
            items.append({"key": "again", "seed": number, "tensors": parcel.add(second)})
            del second, inputs
            parcel.send(self.channel, {"m": "checked", "seed": number, "items": items})
        return aliased

    def time_pairs(self, model: Any, call_bytes: int) -> dict[str, list[float]]:
        """The timed calls (the reward), with the threads and Triton launches around them."""
        spec, result, launches, torch = self.spec, self.result, self.launches, self.calls.torch
        # On a GPU the timed calls' tensors do not grow the host's heap.
        if self.calls.device.type == "cpu":
            reserve(torch, spec, call_bytes)
        result["threads_before"] = _threads()
        result["torch_threads_before"] = torch.get_num_threads()
        label = "eager" if spec.role == "reference" else "candidate"
        launched_before = launches.total() if launches is not None else 0
        times = {label: self.timing.run(model, Phase.PAIRS)}
        self.stages.done("timed")
        if launches is not None:
            timed_calls = len(times[label])
            result["triton"] = launches.report(launches.total() - launched_before, timed_calls)
        result["threads_after"] = _threads()
        result["torch_threads_after"] = torch.get_num_threads()
        return times

    def time_baselines(self, model: Any, times: dict[str, list[float]]) -> None:
        """The reference's baselines (the harness's overhead, ``torch.compile``) and roofline."""
        spec, calls, timing = self.spec, self.calls, self.timing
        # An identity model reads nothing of its inputs: one set serves it and the roofline.
        identity = lambda *xs: xs[0]  # noqa: E731
        baseline_inputs = calls.make_inputs(spec.warmup_seeds[0])
        timing.warm_up(identity, baseline_inputs)
        times["overhead"] = timing.run(identity, Phase.IDENTITY, one_input_set=baseline_inputs)
        if spec.compile_baseline:
            compiled = calls.torch.compile(model)
            timing.warm_up(compiled)
            times["compile"] = timing.run(compiled, Phase.COMPILE)
        if spec.roofline:  # the parent keeps a measurement per task
            try:
                self.result["roofline"] = roofline(
                    calls.torch, model, baseline_inputs, calls.device, calls.sync
                )
            except Exception as error:  # informational: never costs the task its reference
                message = f"{type(error).__name__}: {error}"
                self.result["roofline_error"] = message[:_MESSAGE_CHARS]


class _Calls:
    """How this worker calls a model: on its device (deterministic maths, one thread), inputs
    made there from a seed, outputs read as plain tensors; what it relies on bound before the
    candidate loads."""

    def __init__(self, torch: Any, device_name: str) -> None:
        self.torch = torch
        self.sequences = (list, tuple, *_named_tuples(torch))
        device = torch.device(device_name)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", 0)
        self.device = device
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_num_threads(1)
        self.device_sync = None
        if device.type == "cuda":
            torch.cuda.set_device(device)
            # The device-wide wait the parent's stamps rely on.
            self.device_sync = torch._C._cuda_synchronize
        self.get_inputs: Callable[[], list] = list

    def sync(self) -> None:
        if self.device_sync is not None:
            self.device_sync()

    def make_inputs(self, seed: int) -> list:
        torch, device = self.torch, self.device
        torch.manual_seed(seed)
        # On the device: made on the host, fresh inputs would cost far more than a kernel's call.
        with device:
            made = self.get_inputs()
        return [value.to(device) if isinstance(value, torch.Tensor) else value for value in made]

    def fresh(self, inputs: list) -> list:
        return [
            value.clone() if isinstance(value, self.torch.Tensor) else value for value in inputs
        ]

    def flat(self, output: object, where: str) -> list:
        """``output``'s tensors (a Failure for anything but plain ``torch.Tensor``s), read by
        exact type through the base class: a subclass could run code when iterated."""
        values = _items(output) if type(output) in self.sequences else [output]
        for position, value in enumerate(values):
            if type(value) is not self.torch.Tensor:
                kind = f"{type(value).__module__}.{type(value).__qualname__}"
                raise Failure(
                    "runtime_error",
                    f"{where}: output {position} is a {kind}, not a plain torch.Tensor",
                )
        return values

    def unchanged(self, made: list, after: list) -> bool:
        """The call left its inputs as they were made (NaN equal to NaN)."""
        torch = self.torch
        return len(made) == len(after) and all(
            a.dtype == b.dtype
            and a.shape == b.shape
            and (
                torch.equal(a, b)
                or (a.is_floating_point() and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
            )
            for a, b in zip(made, after)
        )

    def aliases(self, outputs: list, inputs: list) -> bool:
        """Some output shares its storage with an input."""
        pointers = {
            value.untyped_storage().data_ptr()
            for value in inputs
            if isinstance(value, self.torch.Tensor) and value.numel()
        }
        return any(out.numel() and out.untyped_storage().data_ptr() in pointers for out in outputs)


class _Stages:
    """Seconds of the worker's stages by its own clock (``WorkerReport.stages``)."""

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
