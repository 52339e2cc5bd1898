"""The harness half that runs inside the sandbox for one KernelBench program (stdlib + torch).

Started as ``python3 -I -B worker.py SPEC.json`` in a sandboxed process of its own, once for the
reference and once for the candidate, so the candidate can never patch the reference's code or
the functions that judge it; an evaluation of several rounds starts ``worker.py --zygote`` once
per side instead (``_zygote``), which imports torch and forks the side's worker for each round.
It imports no maxcode module (it is copied next to the job's files). It first re-executes itself
with address-space randomization off and shifts its layout by the round's draw
(``_fix_layout``), so the two sides timed against each other do not differ by their layout.

It produces *evidence*, not a verdict. The spec file holds only what building the model needs;
the seeds of the checked and timed inputs come from the parent over descriptor 3 (a socket),
just in time. The conversation there (JSON lines; tensors as sealed memory files beside the
line that describes them, ``_Pack``):

- ``ready`` (seconds of one warmed-up call, output bytes); the parent answers with the check
  seeds.
- ``checked``, once per check seed (each run twice): outputs and changed inputs
  (``evidence.Checked``).
- per chunk of timed calls: ``next`` (the parent answers with the chunk's seeds when it is this
  worker's turn, none when the phase is over), ``begin`` and ``end`` (with the calls' in-process
  seconds) around the calls, then ``outputs`` with every call's outputs (the parent draws which
  it checks and never says).

The two workers take turns chunk by chunk on the timing CPU. The parent stamps every message
with its own clock, so a candidate that patches this process can at most lie about its own
timings and outputs, which are checked there.

Roles: ``reference`` (the problem's ``Model``; timing of eager, ``torch.compile`` when asked,
and an identity model for the harness's own overhead), ``candidate`` (``ModelNew``; import =
build of its extensions), ``build`` (import only, to fill the build cache), ``kernels`` (one
forward under Nsight Compute), ``compile_check`` (compile ``load_inline`` sources, not load).
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
_read = os.read
_pwrite = os.pwrite
_memfd = os.memfd_create
_dumps = json.dumps
_loads = json.loads
_CHANNEL_FD = 3
_MESSAGE_CHARS = 6000
_LINE_BYTES = 1 << 20


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


class _Channel:
    """This process's end of descriptor 3: JSON lines to the parent and its answers."""

    def __init__(self) -> None:
        import socket

        self.pending = b""
        # A descriptor of its own for the socket object, which closes it when collected.
        try:
            self.socket = socket.socket(fileno=os.dup(_CHANNEL_FD))
        except OSError as error:
            raise self._broken(str(error)) from None

    def send(self, message: dict[str, Any], fds: tuple[int, ...] | list[int] = ()) -> None:
        """One message; ``fds`` (memory files, ``_Pack``) go with its first byte."""
        import array
        import socket

        data = (_dumps(message) + "\n").encode()
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            try:
                sent = self.socket.sendmsg([data], rights)
            except OSError as error:
                raise self._broken(str(error)) from None
            data = data[sent:]
        self._write_all(data)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive()

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self.pending:
            try:
                chunk = _read(_CHANNEL_FD, 1 << 16)
            except OSError as error:
                raise self._broken(str(error)) from None
            if not chunk or len(self.pending) > _LINE_BYTES:
                raise self._broken("closed by the parent")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        answer = _loads(line)
        if not isinstance(answer, dict) or "refused" in answer:
            raise self._broken(str(answer.get("refused") if isinstance(answer, dict) else line))
        return answer

    def _write_all(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            try:
                written = _write(_CHANNEL_FD, view)
            except OSError as error:
                raise self._broken(str(error)) from None
            view = view[written:]

    @staticmethod
    def _broken(why: str) -> _Failure:
        return _Failure("channel_error", f"the harness's channel (descriptor 3) failed: {why}")


def _load_module(name: str, path: str, overrides: dict[str, int]) -> Any:
    """Import the file at ``path`` as module ``name``: a real import from a real file (Triton
    reads a ``@triton.jit`` kernel's source back from its module's file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
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
    # Everything is written: skip the interpreter's teardown (most of a second with torch).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(spec: dict[str, Any], result: dict[str, Any]) -> None:
    if spec["role"] == "compile_check":
        _compile_check(spec, result)
        return
    stages = _Stages(result)
    triton = spec.get("backend") == "triton" and spec["role"] != "reference"
    launches = _TritonLaunches.install(spec) if triton else None
    import torch

    _pin()
    stages.done("torch")
    # Output containers read as stored: exact lists, tuples and torch's named tuples, taken
    # before a candidate loads (their classes can be patched).
    sequences = (list, tuple, *_named_tuples(torch))

    device = torch.device(spec["device"])
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
    overrides = spec["overrides"]
    try:
        problem = _load_module("maxcode_problem", spec["problem"], overrides)
    except BaseException as error:
        raise _Failure(
            "load_error", f"the problem file fails to load: {error}", traceback.format_exc()
        ) from None
    if spec["role"] == "reference":
        factory = problem.Model
        stages.done("load")
    else:
        if device.type == "cuda":
            _light_cuda_builds()
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
        if spec["role"] == "build":
            # Importing built the extensions into the cache; the evaluation will load them.
            return
        factory = getattr(candidate, "ModelNew", None)
        if factory is None:
            raise _Failure("compile_error", "the candidate defines no ModelNew class")
        stages.done("load")
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
                raise _Failure(
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

    if spec["role"] == "kernels":
        _forward_under_nvtx(torch, model, make_inputs(spec["warmup_seeds"][0]), fresh, sync)
        return
    channel = _Channel()
    timing = _Timing(
        torch,
        spec,
        device,
        make_inputs,
        sync,
        lambda out: flat(out, "timed call"),
        channel,
        _staging(torch, device),
    )
    aliased: list[int] = []
    # On a GPU, outputs reach the memory files through pinned host memory, a piece at a time.
    staging = _staging(torch, device)
    checked = model if launches is None else launches.per_call(model)
    with torch.no_grad():
        # Warm-up on inputs of its own seeds; untimed (Triton interpreted): none.
        stages.done("model")
        estimate, output_bytes, input_bytes, inputs_s = (
            timing.warm_up(model) if spec.get("timed", True) else (0.0, 0, 0, 0.0)
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
            pack = _Pack(torch, staging, int(spec["segment_bytes"]))
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
        if not spec.get("timed", True):
            if launches is not None:
                result["triton"] = launches.report(None, 0)
            result["times"] = {}
            return
        # On a GPU the timed calls' tensors do not grow the host's heap.
        if device.type == "cpu":
            _reserve(torch, spec, output_bytes + input_bytes)
        result["threads_before"] = _threads()
        result["torch_threads_before"] = torch.get_num_threads()
        times: dict[str, list[float]] = {}
        label = "eager" if spec["role"] == "reference" else "candidate"
        launched_before = launches.total() if launches is not None else 0
        times[label] = timing.run(model, "K")
        stages.done("timed")
        if launches is not None:
            timed_calls = len(times[label])
            result["triton"] = launches.report(launches.total() - launched_before, timed_calls)
        result["threads_after"] = _threads()
        result["torch_threads_after"] = torch.get_num_threads()
        if spec.get("profile"):
            seeds = spec["warmup_seeds"]
            started = _perf_counter()
            result["profile"] = _profile(torch, model, [make_inputs(seed) for seed in seeds], sync)
            result["profile_seconds"] = _perf_counter() - started
        if spec["role"] == "reference":
            # The harness's own cost per call: the same loop around an identity model, which
            # reads nothing of its inputs, so one input set serves it and the roofline.
            identity = lambda *xs: xs[0]  # noqa: E731
            baseline_inputs = make_inputs(spec["warmup_seeds"][0])
            timing.warm_up(identity, baseline_inputs)
            times["overhead"] = timing.run(identity, "O", one_input_set=baseline_inputs)
            if spec.get("compile_baseline"):
                compiled = torch.compile(model)
                timing.warm_up(compiled)
                times["compile"] = timing.run(compiled, "C")
            if spec.get("roofline", True):  # the parent keeps a measurement per task
                try:
                    result["roofline"] = _roofline(torch, model, baseline_inputs, device, sync)
                except Exception as error:  # informational: never costs the task its reference
                    message = f"{type(error).__name__}: {error}"
                    result["roofline_error"] = message[:_MESSAGE_CHARS]
    stages.done("baselines")
    result["times"] = times


class _Pack:
    """Tensors copied into sealed memory files and sent in one message (``shared`` reads them
    in the parent): each at an offset of the files' concatenation aligned to ``_ALIGN``, files
    of ``segment_bytes``. Each tensor is written as it is added, so the caller can drop it."""

    def __init__(self, torch: Any, staging: Any, segment_bytes: int) -> None:
        self.torch, self.staging, self.segment = torch, staging, segment_bytes
        self.fds: list[int] = []
        self.used: list[int] = []

    def add(self, values: list[Any]) -> list[dict[str, Any]]:
        """Copies ``values`` (tensors) in; returns their headers."""
        torch = self.torch
        headers = []
        for value in values:
            data = value.detach()
            if not data.is_contiguous():
                data = data.contiguous()
            size = int(data.numel() * data.element_size())
            at = self._place(size)
            headers.append(
                {
                    "dtype": str(data.dtype).removeprefix("torch."),
                    "shape": list(data.shape),
                    "nbytes": size,
                    "at": at,
                }
            )
            if size:
                self._write(data.reshape(-1).view(torch.uint8), at, size)
        return headers

    def _place(self, size: int) -> int:
        if size == 0:
            return 0
        segment = self.segment
        start = -(-self.used[-1] // _ALIGN) * _ALIGN if self.used else segment
        if size <= segment - start:
            self.used[-1] = start + size
            return (len(self.used) - 1) * segment + start
        at = len(self.used) * segment
        whole, rest = divmod(size, segment)
        self.used += [segment] * whole + ([rest] if rest else [])
        if len(self.used) > _MOST_FILES:
            raise _Failure(
                "runtime_error",
                f"outputs of {sum(self.used) / 1e9:.1f} GB in one message: more than "
                f"{_MOST_FILES} memory files of {segment >> 20} MiB, all the harness passes "
                "at once",
            )
        return at

    def _write(self, raw: Any, at: int, size: int) -> None:
        done = 0
        while done < size:
            segment, offset = divmod(at + done, self.segment)
            piece = min(size - done, self.segment - offset)
            while len(self.fds) <= segment:
                self.fds.append(_memfd("maxcode-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING))
            fd = self.fds[segment]
            if self.staging is None:
                _pwrite_all(fd, raw[done : done + piece].numpy(), offset)
            else:  # a device's tensor, through pinned host memory
                step = self.staging.numel()
                for part in range(0, piece, step):
                    count = min(step, piece - part)
                    self.staging[:count].copy_(raw[done + part : done + part + count])
                    _pwrite_all(fd, self.staging[:count].numpy(), offset + part)
            done += piece

    def send(self, channel: _Channel, message: dict[str, Any]) -> None:
        """Seals the files (no write, shrink or growth, by anyone, ever) and sends them with
        ``message``."""
        import fcntl

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        try:
            for fd, used in zip(self.fds, self.used):
                os.ftruncate(fd, used)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            channel.send({**message, "files": len(self.fds)}, self.fds)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []


_ALIGN = 64
_MOST_FILES = 250
_STAGING_BYTES = 64 << 20


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        written = _pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _staging(torch: Any, device: Any) -> Any:
    """Pinned host memory that a device's outputs pass through (None on a CPU)."""
    if device.type != "cuda":
        return None
    return torch.empty(_STAGING_BYTES, dtype=torch.uint8, pin_memory=True)


class _TritonLaunches:
    """Counts launches of the candidate's own ``@triton.jit`` kernels (defined in its file)
    through wrappers of Triton's launch entry points (``JITFunction.run``,
    ``CompiledKernel.__getitem__``, ``InterpretedFunction.run``), installed before the candidate
    is imported.

    It catches a forward that launches none of its kernels, and wrappers put back or replaced
    (``intact`` false). It cannot catch a token kernel beside a PyTorch forward, or a counter
    raised through the closures; both take code written for the purpose, which the store keeps."""

    def __init__(self, candidate: str) -> None:
        self.candidate = os.path.realpath(candidate)
        self.counted = [0, 0]
        """Launches of the candidate's own kernels; launches of other kernels."""
        self.calls: list[int] = []
        """Own launches during each checked forward."""
        self.wrappers: list[tuple[Any, str, Any]] = []

    @classmethod
    def install(cls, spec: dict[str, Any]) -> _TritonLaunches:
        if spec["device"] == "cpu":
            # Read by triton.jit: the candidate's kernels are interpreted on CPU tensors.
            os.environ["TRITON_INTERPRET"] = "1"
        launches = cls(spec["candidate"])
        try:
            launches._wrap(interpreted=spec["device"] == "cpu")
        except ImportError as error:
            raise _Failure(
                "compile_error", f"the Triton backend needs triton installed here: {error}"
            ) from None
        return launches

    def _own(self, kernel: Any) -> bool:
        function = kernel
        for _ in range(4):  # JITFunction -> python function; autotuners wrap .fn further
            code = getattr(function, "__code__", None)
            if code is not None:
                return os.path.realpath(code.co_filename) == self.candidate
            function = getattr(function, "fn", None)
        return False

    def _count(self, kernel: Any) -> None:
        self.counted[0 if self._own(kernel) else 1] += 1

    def _wrap(self, interpreted: bool) -> None:
        import triton.runtime.jit as jit
        from triton.compiler.compiler import CompiledKernel

        count = self._count
        original_run = jit.JITFunction.run

        def run(kernel: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            compiled = original_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            if not warmup and compiled is not None:
                count(kernel)
            return compiled

        original_getitem = CompiledKernel.__getitem__

        def getitem(compiled: Any, grid: Any) -> Any:
            launch = original_getitem(compiled, grid)

            def counted(*args: Any, **kwargs: Any) -> Any:
                done = launch(*args, **kwargs)
                count(getattr(getattr(compiled, "src", None), "fn", None))
                return done

            return counted

        self._replace(jit.JITFunction, "run", run)
        self._replace(CompiledKernel, "__getitem__", getitem)
        if interpreted:
            import triton.runtime.autotuner as autotuner
            import triton.runtime.interpreter as interpreter

            original_interpreted = interpreter.InterpretedFunction.run

            def interpreted_run(kernel: Any, *args: Any, grid: Any, warmup: bool, **kw: Any) -> Any:
                done = original_interpreted(kernel, *args, grid=grid, warmup=warmup, **kw)
                if not warmup:
                    count(kernel)
                return done

            self._replace(interpreter.InterpretedFunction, "run", interpreted_run)
            # No device to time configurations on: an autotuned kernel runs its first one.
            original_prune = autotuner.Autotuner.prune_configs

            def first_config(tuner: Any, kwargs: dict[str, Any]) -> list[Any]:
                return list(original_prune(tuner, kwargs))[:1]

            self._replace(autotuner.Autotuner, "prune_configs", first_config)

    def _replace(self, owner: Any, name: str, wrapper: Any) -> None:
        setattr(owner, name, wrapper)
        self.wrappers.append((owner, name, wrapper))

    def total(self) -> int:
        return self.counted[0]

    def intact(self) -> bool:
        return all(owner.__dict__.get(name) is wrapper for owner, name, wrapper in self.wrappers)

    def per_call(self, model: Callable[..., Any]) -> Callable[..., Any]:
        """``model`` with the launches of each call recorded in ``calls``."""

        def call(*args: Any) -> Any:
            before = self.counted[0]
            output = model(*args)
            self.calls.append(self.counted[0] - before)
            return output

        return call

    def report(self, timed: int | None, timed_calls: int) -> dict[str, Any]:
        return {
            "checked": self.calls,
            "timed": timed,
            "timed_calls": timed_calls,
            "other": self.counted[1],
            "intact": self.intact(),
        }


class _Stages:
    """Seconds of the worker's stages by its own clock (informational, see the report)."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.seconds: dict[str, float] = {}
        result["stages"] = self.seconds
        self.last = _perf_counter()

    def done(self, stage: str) -> None:
        now = _perf_counter()
        self.seconds[stage] = now - self.last
        self.last = now


NVTX_RANGE = "maxcode_forward"
"""The NVTX range around the one forward Nsight Compute profiles (role ``kernels``)."""


_ALIGNMENT_SLACK = 16 << 20
"""Bytes the reserve holds beyond its chunks and calls, for their tensors' 2 MiB alignment."""
_TRIM_BYTES = int(os.environ.get("MALLOC_TRIM_THRESHOLD_", 1 << 30))
"""Free memory at the top of the heap beyond which the allocator hands it back."""


def _reserve(torch: Any, spec: dict[str, Any], call_bytes: int) -> None:
    """Faults in, before the timed calls, the heap the chunks will need (twice a chunk's inputs
    and outputs, twice one call's more) and hands it back to the allocator, which keeps it up
    to its trim threshold. Otherwise page faults of a growing heap fall inside one side's calls
    (identical candidates scored 0.15-0.55). One block, after small blocks are freed, so that
    2 MiB-aligned tensors find room in one piece."""
    if call_bytes <= 0:
        return
    chunk = min(int(spec.get("chunk_bytes", 0)), int(spec.get("chunk_calls", 0)) * call_bytes)
    pool = [torch.empty(number % 4096 + 1) for number in range(4096)]
    pool += [bytes(512 + 61 * number) for number in range(2048)]
    del pool
    # One call at least, its tensors' alignment, and the largest chunk pad.
    room = 2 * max(chunk, call_bytes) + 2 * call_bytes + _ALIGNMENT_SLACK + CHUNK_PAD_BYTES
    # No more than the allocator keeps (runner ``MALLOC_TRIM_THRESHOLD_``): more only raises
    # the peak memory.
    room = min(room, _TRIM_BYTES - _ALIGNMENT_SLACK)
    reserve = torch.ones(room, dtype=torch.uint8)
    del reserve


def _forward_under_nvtx(
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


def _roofline(torch: Any, model: Any, inputs: list[Any], device: Any, sync: Callable) -> dict:
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
        start = _perf_counter()
        work()
        sync()
        best = min(best, _perf_counter() - start)
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
    """Bytes/s of the better of a copy (bytes read and written) and a sum (bytes read): over
    512 MiB on a GPU (device memory, as the timed calls flush L2), over the task's own size on
    a CPU (1 to 128 MiB, where fresh inputs sit in the caches)."""
    size = 512 << 20 if device.type == "cuda" else min(max(moved, 1 << 20), 128 << 20)
    buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
    copy = _best_seconds(lambda: buffer.clone(), sync)
    read = _best_seconds(lambda: buffer.sum(), sync)
    return max(2.0 * size / copy, size / read)


_TOP_OPERATORS = 8


def _profile(
    torch: Any, model: Callable[..., Any], inputs: list[list[Any]], sync: Callable[[], None]
) -> dict[str, Any]:
    """Where one forward's time goes (``torch.profiler``): the top operators or kernels by
    their own time, launches and bytes allocated per call. Informational: it feeds the critic,
    never the reward."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler import profile

    cuda = any(
        isinstance(value, torch.Tensor) and value.is_cuda for values in inputs for value in values
    )
    calls = len(inputs)
    # The profiler beneath torch.profiler.profile: the wrapper imports torch._inductor (1.6 s).
    with profile(
        use_cpu=True, use_device="cuda" if cuda else None, profile_memory=True, use_kineto=True
    ) as prof:
        for given in inputs:
            model(*given)
        sync()
    averages = prof.key_averages()
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
    busy = [event for event in averages if own_time(event) > 0]
    total = sum(own_time(event) for event in busy) or 1.0
    ranked = sorted(busy, key=own_time, reverse=True)[:_TOP_OPERATORS]
    return {
        "clock": "cuda" if cuda else "cpu",
        "top": [
            {"name": e.key[:80], "share": own_time(e) / total, "calls": e.count / calls}
            for e in ranked
        ],
        "launches": launches,
        "allocated_bytes": int(allocated / calls),
    }


_TORCH_NAMES = ("torch", "ATen", "at::", "c10", "C10_", "TORCH_", "AT_", "pybind")
"""Names that tie a CUDA source to torch's headers (``_light_headers``)."""

_LIGHT_CUDA_HEADERS = ["#include <cuda.h>", "#include <cuda_runtime.h>"]
"""What a CUDA source that names nothing of torch's gets in place of ``torch/types.h``."""


def _light_headers(cuda_sources: list[str]) -> bool:
    """Whether ``cuda_sources`` can build without the ``torch/types.h`` that ``load_inline``
    puts before them (they name nothing of torch's): that header is most of a small CUDA
    extension's build time."""
    return bool(cuda_sources) and not any(
        name in source for source in cuda_sources for name in _TORCH_NAMES
    )


def _light_cuda_builds() -> None:
    """``load_inline`` builds CUDA sources that name nothing of torch's without torch's
    implicit header (``_light_headers``); should that fail, it builds them again as torch
    would, so no source fails here that torch's own build accepts."""
    import torch.utils.cpp_extension as extension

    original = extension.load_inline

    def load_inline(
        name: str, cpp_sources: Any, cuda_sources: Any = None, *more: Any, **options: Any
    ) -> Any:
        cuda = _as_list(cuda_sources)
        if more or options.get("no_implicit_headers") or not _light_headers(cuda):
            return original(name, cpp_sources, cuda_sources, *more, **options)
        cpp = ["#include <torch/extension.h>", *_as_list(cpp_sources)]
        light = {**options, "no_implicit_headers": True}
        try:
            return original(name, cpp, [*_LIGHT_CUDA_HEADERS, *cuda], **light)
        except Exception:
            return original(name, cpp_sources, cuda_sources, **options)

    extension.load_inline = load_inline


# What torch's own CUDA extension builds pass to nvcc.
_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
    "-Xcompiler",
    "-fPIC",
]


def _compile_check(spec: dict[str, Any], result: dict[str, Any]) -> None:
    """Compile the sources of every ``load_inline`` call of the candidate without loading them
    (for CUDA candidates on a machine with nvcc and no GPU): the call is recorded instead of
    built, then its sources are written as torch writes them and compiled one by one."""
    import shutil
    import subprocess
    import sysconfig

    import torch
    import torch.utils.cpp_extension as extension

    calls: list[dict[str, Any]] = []

    class _NotLoaded:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("compile check: the extension is built, not loaded")

            return refuse

    def record(name: str, cpp_sources: Any, cuda_sources: Any = None, **options: Any) -> Any:
        calls.append({"name": name, "cpp": cpp_sources, "cuda": cuda_sources, **options})
        return _NotLoaded()

    extension.load_inline = record  # type: ignore[assignment]
    try:
        _load_module("maxcode_candidate", spec["candidate"], spec["overrides"])
    except SyntaxError as error:
        message = f"candidate.py:{error.lineno}: syntax error: {error.msg}"
        raise _Failure("compile_error", message) from None
    except BaseException as error:  # only fatal when nothing was recorded
        if not calls:
            message = f"{type(error).__name__}: {error}"
            raise _Failure("compile_error", message, traceback.format_exc(limit=-3)) from None
    torch_root = os.path.dirname(torch.__file__)
    includes = [
        os.path.join(torch_root, "include"),
        os.path.join(torch_root, "include", "torch", "csrc", "api", "include"),
        sysconfig.get_paths()["include"],
        spec["stubs"],
    ]
    # torch's CUDA builds give every source the toolkit's headers (the C++ sources too).
    found = os.path.realpath(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    homes = [os.environ.get("CUDA_HOME", ""), os.path.dirname(os.path.dirname(found))]
    includes += [
        os.path.join(home, "include")
        for home in [*homes, "/usr/local/cuda"]
        if home and os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h"))
    ][:1]
    log: list[str] = []
    checked: list[str] = []
    for call in calls:
        folder = os.path.join(os.getcwd(), "check", str(len(checked)))
        os.makedirs(folder)
        common = [f"-I{path}" for path in [*includes, *(call.get("extra_include_paths") or [])]]
        common += [f"-DTORCH_EXTENSION_NAME={call['name']}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
        commands = []
        cpp = _as_list(call["cpp"])
        functions = call.get("functions")
        if isinstance(functions, str):
            functions = [functions]
        if functions:
            cpp += ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
            cpp += [f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in functions]
            cpp += ["}"]
        with open(os.path.join(folder, "main.cpp"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(["#include <torch/extension.h>", *cpp]))
        compiler = os.environ.get("CXX", "g++")
        cflags = list(call.get("extra_cflags") or [])
        commands.append(
            [compiler, "-fsyntax-only", "-std=c++20", "-fPIC", *common, *cflags, "main.cpp"]
        )
        cuda = _as_list(call["cuda"])
        if cuda:
            cuda_flags = list(call.get("extra_cuda_cflags") or [])
            nvcc = ["nvcc", "-c", "cuda.cu", "-o", "cuda.o", "-std=c++20", *_NVCC_FLAGS]
            commands.append([*nvcc, *common, *cuda_flags])
        # As the GPU build (``_light_cuda_builds``): light headers first, then torch's.
        torch_headers = ["#include <torch/types.h>", *_LIGHT_CUDA_HEADERS]
        tries = [_LIGHT_CUDA_HEADERS, torch_headers] if _light_headers(cuda) else [torch_headers]
        light = False
        for command in commands:
            for headers in tries if command[0] == "nvcc" else [[]]:
                light = headers is _LIGHT_CUDA_HEADERS
                if headers:
                    with open(os.path.join(folder, "cuda.cu"), "w", encoding="utf-8") as handle:
                        handle.write("\n".join([*headers, *cuda]))
                done = subprocess.run(
                    command,
                    cwd=folder,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    check=False,
                )
                if done.returncode == 0:
                    break
            output = (done.stdout + done.stderr).strip()
            if done.returncode != 0:
                log.append(f"$ {' '.join(command[:3])} ... ({call['name']})\n{output}")
                raise _Failure(
                    "compile_error",
                    f"extension {call['name']!r} does not compile",
                    "\n\n".join(log),
                )
        checked.append(f"{call['name']} without torch's headers" if light else call["name"])
    result["checked"] = checked


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else [str(source) for source in sources]


PLACEMENT_BYTES = 2 << 20
"""The span over which a timed input's place is drawn (``_Timing._placed``)."""
_PAGE = 4096
CHUNK_PAD_BYTES = 8 << 20
"""The most a chunk's buffers are shifted by on a CPU (``chunk_pad_bytes``)."""


def _mixed(value: int) -> int:
    """A multiplicative hash of ``value`` to 64 bits: the draws of places and pads from the
    parent's seeds (nothing a candidate's patch of a module could reach)."""
    return (value * 0xBF58476D1CE4E5B9) % (1 << 64)


def chunk_pad_bytes(seed: int) -> int:
    """Bytes of the pad a CPU chunk whose first call has ``seed`` allocates before its inputs
    and frees with its outputs: whole pages below ``CHUNK_PAD_BYTES``, drawn from the seed, so
    the same on both sides. Without it a forward's temporaries land on the same pages for a
    whole worker, a bias of each pair of processes; shifted per chunk, the pairs average it."""
    return _PAGE * ((_mixed(seed) >> 20) % (CHUNK_PAD_BYTES // _PAGE))


class _Timing:
    """Timed calls of one callable: each call gets inputs of its own, from a seed the parent
    sends just before the call's chunk, made outside the timed window, so no cache of earlier
    answers can serve it. After a chunk every call's outputs are sent and the parent checks
    those it drew without naming them, so no call can leave its work to unchecked outputs. On
    CUDA the L2 cache is flushed before each call (``_call``)."""

    def __init__(
        self,
        torch: Any,
        spec: dict[str, Any],
        device: Any,
        make_inputs: Callable[[int], list[Any]],
        sync: Callable[[], None],
        flat: Callable[[Any], list[Any]],
        channel: _Channel,
        staging: Any,
    ) -> None:
        self.torch, self.spec, self.device = torch, spec, device
        self.make_inputs, self.sync, self.flat = make_inputs, sync, flat
        self.channel, self.staging = channel, staging
        self.cuda = device.type == "cuda"
        self.last: Any = None

    def warm_up(
        self, model: Callable[..., Any], inputs: list[Any] | None = None
    ) -> tuple[float, int, int, float]:
        """Warm-up calls (two once ``warmup_s`` is spent on the calls and on making their
        inputs, which can take far longer than the calls); returns the seconds of the fastest
        call, one call's output and input bytes, and the seconds of the fastest making of one
        call's inputs. With ``inputs`` (a model that reads none), every call gets those."""
        spec = self.spec
        estimate, output_bytes, input_bytes, spent = float("inf"), 0, 0, 0.0
        making = float("inf")
        seeds = spec["warmup_seeds"]
        for number in range(spec["warmup"]):
            seed = seeds[number % len(seeds)]
            start = _perf_counter()
            given = inputs if inputs is not None else self._placed(self.make_inputs(seed), seed)
            self.sync()
            made = _perf_counter() - start
            making = 0.0 if inputs is not None else min(making, made)
            start = _perf_counter()
            output = model(*given)
            self.sync()
            seconds = _perf_counter() - start
            estimate, spent = min(estimate, seconds), spent + made + seconds
            values = output if isinstance(output, (tuple, list)) else [output]
            output_bytes, input_bytes = self._bytes(values), self._bytes(given)
            # Let go before the next inputs are made (gigabytes at full size).
            del given, output, values
            if number >= 1 and spent >= spec.get("warmup_s", float("inf")):
                break
        if estimate == float("inf"):
            return 0.0, output_bytes, input_bytes, 0.0
        return estimate, output_bytes, input_bytes, making

    def _placed(self, inputs: list[Any], seed: int) -> list[Any]:
        """On a CPU, each contiguous input tensor copied to a place drawn from the call's seed:
        whole pages within ``PLACEMENT_BYTES`` (or the next power of two above its size) past
        the start of a buffer of its own, the same draws on both sides. Where an output lands
        relative to its input changes a call's speed (identical cumsum candidates scored
        1.11-1.17 from heap history alone); drawn per call, the offset is noise the pairs
        average, not a bias a round repeats."""
        if self.cuda:
            return inputs
        torch = self.torch
        placed = []
        for number, value in enumerate(inputs):
            if not (isinstance(value, torch.Tensor) and value.is_contiguous() and value.numel()):
                placed.append(value)
                continue
            size = value.numel() * value.element_size()
            span = min(PLACEMENT_BYTES, 1 << (size - 1).bit_length())
            if span <= _PAGE:  # nothing to draw within a page
                placed.append(value)
                continue
            # The parent's seed mixed with the input's number.
            mixed = _mixed(seed ^ (number * 0x9E3779B97F4A7C15))
            offset = _PAGE * ((mixed >> 24) % (span // _PAGE))
            room = torch.empty(size + span, dtype=torch.uint8)
            moved = room[offset : offset + size].view(value.dtype).view(value.shape)
            moved.copy_(value)
            placed.append(moved)
        return placed

    def _bytes(self, values: Any) -> int:
        return sum(
            value.numel() * value.element_size()
            for value in values
            if isinstance(value, self.torch.Tensor)
        )

    def run(
        self, model: Callable[..., Any], phase: str, *, one_input_set: list[Any] | None = None
    ) -> list[float]:
        """Chunks of timed calls for as long as the parent sends seeds; ``one_input_set``:
        those inputs serve every call (a model that reads none of them)."""
        torch = self.torch
        flush = torch.empty(64 << 20, dtype=torch.int32, device=self.device) if self.cuda else None
        samples: list[float] = []
        chunk = 0
        while True:
            where = {"phase": phase, "chunk": chunk}
            answer = self.channel.ask({"m": "next", **where})
            seeds = [int(seed) for seed in answer["seeds"]]
            if not seeds:
                return samples
            # The chunk's inputs are made before its begin marker, so the host time between the
            # markers is the calls'. The chunk's pad is the one other allocation: where a buffer
            # lands then follows from the calls alone, the same on both sides for one program.
            pad = None
            if not self.cuda:
                pad = torch.empty(chunk_pad_bytes(seeds[0]) + 1, dtype=torch.uint8)
            batch = []
            for seed in seeds:
                if one_input_set is None:
                    batch.append(self._placed(self.make_inputs(seed), seed))
                else:
                    batch.append(one_input_set)
            # On a GPU, wait for the kernels that make the inputs, or they fall in the calls'
            # window (which voided an honest kernel).
            self.sync()
            outputs: list[list[Any]] = []
            times: list[float] = []
            # The parent reads this process's CPU clock before it answers.
            self.channel.ask({"m": "begin", **where})
            marks = []
            for given in batch:
                marks.append(self._call(model, given, flush))
                # Every call's outputs made plain tensors: which are kept is drawn after the chunk.
                outputs.append(self.flat(self.last))
                self.last = None
            times = self._claims(marks)
            # Waits for the answer at once: the parent reads this process's CPU clock while it
            # is blocked (read while it runs, the clock lags up to a scheduler tick).
            self.channel.send({"m": "end", **where, "times": times})
            self.channel.receive()
            samples += times
            del batch, given
            self._send_outputs(outputs if phase == "K" else [], where)
            # Freed before the next chunk is asked for, so the freeing counts in this chunk.
            del outputs, pad
            chunk += 1

    def _send_outputs(self, outputs: list[list[Any]], where: dict[str, Any]) -> None:
        """Sends ``outputs``, every call's of the chunk, in order, in memory files (``_Pack``),
        each marked ``reused`` when a later call of the chunk returned its buffer again (its
        values are gone by now). Found here, after the calls, not between them."""
        owners: dict[int, int] = {}
        reused: set[int] = set()
        for position, values in enumerate(outputs):
            for value in values:
                if value.numel():
                    address = value.untyped_storage().data_ptr()
                    if address in owners:
                        reused.add(owners[address])
                    owners[address] = position
        pack = _Pack(self.torch, self.staging, int(self.spec["segment_bytes"]))
        items = [
            {"position": position, "tensors": pack.add(values), "reused": position in reused}
            for position, values in enumerate(outputs)
        ]
        pack.send(self.channel, {"m": "outputs", **where, "items": items})

    def _call(self, model: Callable[..., Any], given: list[Any], flush: Any) -> Any:
        """One timed call (its output left in ``self.last``): its seconds on a CPU, its
        events on a GPU (read by ``_claims``)."""
        torch = self.torch
        if flush is not None:
            # L2 flushed on the call's stream, without waiting: the device runs the chunk back
            # to back, so the chunk's host time is the device's, not the launches'.
            stream = torch.cuda.current_stream(self.device)
            flush.zero_()
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record(stream)
            self.last = model(*given)
            end.record(stream)
            return begin, end
        start = _perf_counter()
        self.last = model(*given)
        return float(_perf_counter() - start)

    def _claims(self, marks: list[Any]) -> list[float]:
        """The calls' in-process seconds: on a GPU, by their events, once the whole device is
        done (side streams included: the end marker follows this wait)."""
        if not self.cuda:
            return marks
        self.sync()
        return [float(begin.elapsed_time(end)) / 1000.0 for begin, end in marks]


def _named_tuples(torch: Any) -> list[type]:
    """torch's named tuples (``torch.return_types``), which outputs may be."""
    found = vars(getattr(torch, "return_types", object())).values()
    return [kind for kind in found if isinstance(kind, type) and issubclass(kind, tuple)]


def _items(sequence: Any) -> list[Any]:
    """The items a list or tuple stores, read by the base type's own slots."""
    base: Any = list if isinstance(sequence, list) else tuple
    return [base.__getitem__(sequence, index) for index in range(base.__len__(sequence))]


_ADDR_NO_RANDOMIZE = 0x0040000
"""personality(2) flag: the process's address space is laid out the same way in every run."""


def _libc(name: str, *arguments: int) -> int:
    """The C library's ``name`` called with ``arguments``; -1 when it cannot be called."""
    try:
        import ctypes

        return int(getattr(ctypes.CDLL(None, use_errno=True), name)(*arguments))
    except (OSError, AttributeError):
        return -1


def _personality(persona: int = 0xFFFFFFFF) -> int:
    """personality(2): sets ``persona`` and returns the previous one (the default only asks);
    -1 when it is refused or cannot be called."""
    return _libc("personality", persona)


_PR_SET_THP_DISABLE = 41


def _no_huge_pages() -> None:
    """Transparent huge pages off for this process and what it executes (prctl(2), kept across
    execve): whether a process got them was a draw per process, and identical candidates
    scored 0.43-0.46 with them on. The parent checks they stay off (judge ``memory``)."""
    _libc("prctl", _PR_SET_THP_DISABLE, 1, 0, 0, 0)


def _fix_layout() -> None:
    """Re-execute this worker once with address-space randomization off, before torch loads,
    then shift the layout by the round's draw (``_shift_layout``), the same on both sides.

    A random layout makes a process a few percent faster or slower for its whole life, which
    alternating chunks cannot cancel; drawn per round and shared by the round's two workers
    (``MAXCODE_LAYOUT_SEED``), rounds sample what a layout does and the sides differ only by
    their code. Where personality(2) is refused, the worker runs as it is, shifted all the
    same."""
    stack, pages, heap = _layout_draw()
    if os.environ.get(_LAYOUT_SET) is None:
        persona = _personality()
        if (
            persona != -1
            and not persona & _ADDR_NO_RANDOMIZE
            and _personality(persona | _ADDR_NO_RANDOMIZE) != -1
        ):
            os.environ[_LAYOUT_SET] = "1"
            # The stack starts below the environment's strings: this one moves it.
            os.environ["MAXCODE_LAYOUT_PAD"] = "." * stack
            try:
                os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
            except OSError:
                _personality(persona)  # could not start again: go on as this process is
    _shift_layout(pages, heap)


_LAYOUT_SET = "MAXCODE_LAYOUT_SET"
"""Set by ``_fix_layout`` before it re-executes the worker (once is enough)."""


def _layout_draw() -> tuple[int, int, int]:
    """The round's shift, from ``MAXCODE_LAYOUT_SEED`` (0 when absent): bytes of environment
    below the stack's start (16-byte steps, up to 64 KiB), pages reserved before the next
    mappings (up to 16 MiB), bytes of heap allocated first (16-byte steps, up to 2 MiB)."""
    try:
        seed = int(os.environ.get("MAXCODE_LAYOUT_SEED", "0"))
    except ValueError:
        seed = 0
    return (seed & 0xFFF) * 16, (seed >> 12) & 0xFFF, ((seed >> 24) & 0x1FFFF) * 16


_PROT_NONE, _MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0, 0x02, 0x20, 0x4000


def _shift_layout(pages: int, heap: int) -> None:
    """Move where later mappings (torch's libraries, Python's arenas, large buffers) and heap
    allocations land, by the round's draw (``_layout_draw``): an inaccessible reservation of
    ``pages`` below the mappings made so far, and a heap block of ``heap`` bytes, both kept
    for the life of the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = libc.malloc.restype = ctypes.c_void_p
        whole, size, number = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        libc.mmap.argtypes = [whole, size, number, number, number, ctypes.c_long]
        libc.malloc.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return
    if pages:
        flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE
        libc.mmap(None, pages * 4096, _PROT_NONE, flags, -1, 0)
    if heap:
        libc.malloc(heap)


def _pin() -> None:
    """Pin every thread of this process to its timing CPU, ``MAXCODE_CPU`` when the parent set
    it (runner ``pins_late``), once torch is loaded and before the task's code runs, so the two
    workers load torch on two CPUs at once. Code can undo a pin; the parent reads the workers'
    CPU clocks (judge ``_resources``)."""
    wanted = os.environ.get("MAXCODE_CPU")
    if wanted is None:
        return
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), {int(wanted)})


_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
ZYGOTE = "--zygote"
"""The argument that starts this file as a side's zygote (``_zygote``) instead of one run."""


def _zygote() -> int:
    """One side's process for a whole evaluation: import torch once, then fork this side's
    worker for each round ordered on descriptor 3 (a ``SOCK_SEQPACKET`` socket: the order as
    JSON, ``spec``, ``folder``, ``layout``, ``wall_s``, ``cpu_s``, with the round's conversation
    socket attached), answering once the round's processes are gone (``_serve_round``).

    No code of the task runs here, and the workers cannot reach this process: it is not
    dumpable, and it is their subreaper, so whatever a round leaves is killed before the next."""
    import signal
    import socket

    import torch  # noqa: F401  (what every round's worker imports: once, here)

    _libc("prctl", _PR_SET_DUMPABLE, 0, 0, 0, 0)
    _libc("prctl", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    control = socket.socket(fileno=_CHANNEL_FD)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            return 0
        if not message:
            return 0
        answer = _serve_round(json.loads(message), fds, control)
        control.send(json.dumps(answer).encode())


def _serve_round(order: dict[str, Any], fds: list[int], control: Any) -> dict[str, Any]:
    """Fork the round's worker, wait for it (killed at ``wall_s``), kill what it left, and
    say how it ended: its wait status, whether its time ran out, its wall time, the CPU time
    of every process of the round (the worker, its children, what they left) and the
    worker's peak memory."""
    import resource
    import signal

    if len(fds) != 1:
        return {"problem": "no conversation socket came with the round"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        _forked_worker(order, fds[0], control)
    os.close(fds[0])
    expired = []

    def expire(signum: int, frame: Any) -> None:
        expired.append(True)
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(float(order["wall_s"]), 0.001))
    _, status, usage = os.wait4(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    wall_ns = time.monotonic_ns() - started
    stragglers = _sweep()
    _clear_private_tmp()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "status": status,
        "timed_out": bool(expired),
        "wall_ns": wall_ns,
        "cpu_us": int(cpu * 1e6),
        "maxrss_kb": usage.ru_maxrss,
        "stragglers": stragglers,
    }


def _forked_worker(order: dict[str, Any], conversation: int, control: Any) -> None:
    """The round's worker, in the zygote's fork: the round's conversation as descriptor 3,
    a folder of its own, its output there, the round's layout shift; then ``main``."""
    try:
        import resource
        import signal

        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        control.detach()  # descriptor 3: the conversation replaces it
        os.dup2(conversation, _CHANNEL_FD)
        os.close(conversation)
        _libc("prctl", _PR_SET_DUMPABLE, 1, 0, 0, 0)
        cpu_s = int(order["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        os.mkdir(order["folder"], 0o755)
        os.chdir(order["folder"])
        for fd, name in ((1, "stdout"), (2, "stderr")):
            opened = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.environ["MAXCODE_LAYOUT_SEED"] = str(int(order["layout"]))
        _, pages, heap = _layout_draw()
        _shift_layout(pages, heap)
        main(order["spec"])
    except BaseException:
        traceback.print_exc()
    os._exit(70)


def _sweep() -> bool:
    """Kill and reap every child this process has (a round's leftovers: as the subreaper,
    every orphan of a round comes here), until none is left; whether there was any."""
    import signal

    killed = False
    while True:
        children = _children_of(os.getpid())
        if not children:
            break
        killed = True
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    while True:  # zombies no listing showed
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return killed


def _clear_private_tmp() -> None:
    """Delete what a round left in its run's private ``/tmp`` (the sandbox's own tmpfs, which
    the rounds of one zygote share), so the next round starts from none of it. Only a tmpfs
    the sandbox's init mounted (named ``maxcode``), and never across a folder mounted inside
    it (the job's, a build cache)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split(" - ", 1) for line in handle]
    except OSError:
        return
    for fields, rest in (pair for pair in mounts if len(pair) == 2):
        target, source = fields.split()[4], rest.split()[1:2]
        if target in ("/tmp", "/var/tmp") and source == ["maxcode"]:
            try:
                _clear_folder(target, os.lstat(target).st_dev)
            except (OSError, RecursionError):
                pass


def _clear_folder(folder: str, device: int) -> None:
    import stat

    for entry in os.scandir(folder):
        try:
            info = os.lstat(entry.path)
        except OSError:
            continue
        if info.st_dev != device:
            continue  # a folder the sandbox mounted here
        if stat.S_ISDIR(info.st_mode):
            try:
                os.chmod(entry.path, 0o700)
                _clear_folder(entry.path, device)
                os.rmdir(entry.path)
            except OSError:
                pass  # on the way to a mounted folder
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _children_of(parent: int) -> list[int]:
    """Live children of ``parent``, from ``/proc``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent and fields[0] != b"Z":
            found.append(int(entry))
    return found


if __name__ == "__main__":
    _no_huge_pages()
    _fix_layout()
    sys.exit(_zygote() if sys.argv[1] == ZYGOTE else main(sys.argv[1]))
