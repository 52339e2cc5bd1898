"""Launches of a Triton candidate's own kernels, counted through wrappers of Triton's launch
entry points."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .conversation import Failure
from .protocol import WorkerSpec


class LaunchCounter:
    """Counts launches of the candidate's own ``@triton.jit`` kernels (defined in its file),
    installed before it is imported. It catches a forward that launches none, and wrappers put
    back (``intact`` false); not a token kernel beside a PyTorch forward, or a counter raised
    through the closures: code written for the purpose, which the store keeps."""

    def __init__(self, candidate: str) -> None:
        self.candidate = os.path.realpath(candidate)
        self.counted = [0, 0]
        """Launches of the candidate's own kernels, of other kernels."""
        self.calls: list[int] = []
        self.wrappers: list[tuple[Any, str, Any]] = []

    @classmethod
    def install(cls, spec: WorkerSpec) -> LaunchCounter:
        if spec.device == "cpu":
            # Read by triton.jit: the candidate's kernels are interpreted on CPU tensors.
            os.environ["TRITON_INTERPRET"] = "1"
        launches = cls(spec.candidate)
        try:
            launches._wrap(interpreted=spec.device == "cpu")
        except ImportError as error:
            raise Failure(
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
