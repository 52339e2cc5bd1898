"""Loading the problem and the candidate (import = build of its extensions), lighter CUDA
builds, and the compile check (``load_inline`` sources compiled, nothing loaded)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .conversation import Failure
from .protocol import WorkerSpec


def load_module(name: str, path: str, overrides: dict[str, int]) -> Any:
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


_TORCH_NAMES = ("torch", "ATen", "at::", "c10", "C10_", "TORCH_", "AT_", "pybind")
"""Names that tie a CUDA source to torch's headers (``light_headers``)."""

LIGHT_CUDA_HEADERS = ["#include <cuda.h>", "#include <cuda_runtime.h>"]
"""What a CUDA source that names nothing of torch's gets in place of ``torch/types.h``."""


def light_headers(cuda_sources: list[str]) -> bool:
    """Whether ``cuda_sources`` name nothing of torch's, so build without the ``torch/types.h``
    that ``load_inline`` puts first (most of a small extension's build time)."""
    return bool(cuda_sources) and not any(
        name in source for source in cuda_sources for name in _TORCH_NAMES
    )


def light_cuda_builds() -> None:
    """``load_inline`` builds ``light_headers`` sources without torch's implicit header, and
    as torch would should that fail."""
    import torch.utils.cpp_extension as extension

    original = extension.load_inline

    def load_inline(
        name: str, cpp_sources: Any, cuda_sources: Any = None, *more: Any, **options: Any
    ) -> Any:
        cuda = _as_list(cuda_sources)
        if more or options.get("no_implicit_headers") or not light_headers(cuda):
            return original(name, cpp_sources, cuda_sources, *more, **options)
        cpp = ["#include <torch/extension.h>", *_as_list(cpp_sources)]
        light = {**options, "no_implicit_headers": True}
        try:
            return original(name, cpp, [*LIGHT_CUDA_HEADERS, *cuda], **light)
        except Exception:
            return original(name, cpp_sources, cuda_sources, **options)

    extension.load_inline = load_inline


_HEADER_FAULTS = ("internal compiler error", "precompiled header", "PCH file", ".gch")
"""What g++ says when the precompiled header itself fails it (not the candidate's code)."""


def header_fallback() -> None:
    """A ``load_inline`` build on torch's precompiled header (``CPATH``: the harness's
    ``headers``) that g++ fails on the header itself (an internal compiler error, a
    precompiled header it cannot read) builds again without it: the cache never fails a
    candidate."""
    if not os.environ.get("CPATH"):
        return
    import torch.utils.cpp_extension as extension

    original = extension.load_inline

    def load_inline(*args: Any, **options: Any) -> Any:
        try:
            return original(*args, **options)
        except Exception as error:
            said = str(error)
            if not os.environ.get("CPATH") or not any(f in said for f in _HEADER_FAULTS):
                raise
            del os.environ["CPATH"]
            # Forgotten, so that torch builds it again under the same name.
            name = options.get("name", args[0] if args else None)
            extension.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
            return original(*args, **options)

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


def compile_check(spec: WorkerSpec, result: dict[str, Any]) -> None:
    """Compile the sources of every ``load_inline`` call of the candidate without loading them
    (nvcc and no GPU): the calls recorded, then their sources compiled as torch writes them."""
    calls = _recorded_calls(spec)
    includes = _include_paths(spec.stubs)
    checked: list[str] = []
    for call in calls:
        folder = os.path.join(os.getcwd(), "check", str(len(checked)))
        os.makedirs(folder)
        light = _compile_call(call, includes, folder)
        checked.append(f"{call['name']} without torch's headers" if light else call["name"])
    result["checked"] = checked


def _recorded_calls(spec: WorkerSpec) -> list[dict[str, Any]]:
    """The candidate imported with ``load_inline`` recording its calls instead of building;
    an error after a call was recorded is the extension's refusal to load (``_NotLoaded``)."""
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
        load_module("maxcode_candidate", spec.candidate, spec.overrides)
    except SyntaxError as error:
        message = f"candidate.py:{error.lineno}: syntax error: {error.msg}"
        raise Failure("compile_error", message) from None
    except BaseException as error:  # only fatal when nothing was recorded
        if not calls:
            message = f"{type(error).__name__}: {error}"
            raise Failure("compile_error", message, traceback.format_exc(limit=-3)) from None
    return calls


def _include_paths(stubs: str) -> list[str]:
    """The include paths torch's CUDA builds give every source, with the ``stubs``."""
    import shutil
    import sysconfig

    import torch

    torch_root = os.path.dirname(torch.__file__)
    includes = [
        os.path.join(torch_root, "include"),
        os.path.join(torch_root, "include", "torch", "csrc", "api", "include"),
        sysconfig.get_paths()["include"],
        stubs,
    ]
    found = os.path.realpath(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    homes = [os.environ.get("CUDA_HOME", ""), os.path.dirname(os.path.dirname(found))]
    toolkits = [
        os.path.join(home, "include")
        for home in [*homes, "/usr/local/cuda"]
        if home and os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h"))
    ]
    return includes + toolkits[:1]


def _compile_call(call: dict[str, Any], includes: list[str], folder: str) -> bool:
    """Compile one recorded call's C++ (syntax only, with torch's module definition) and CUDA
    sources as the GPU build does (``light_cuda_builds``); whether light headers did. A Failure
    when a source does not compile."""
    name = call["name"]
    common = [f"-I{path}" for path in [*includes, *(call.get("extra_include_paths") or [])]]
    common += [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    cpp = _as_list(call["cpp"])
    functions = call.get("functions")
    if isinstance(functions, str):
        functions = [functions]
    if functions:
        cpp += ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
        cpp += [f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in functions]
        cpp += ["}"]
    _write(folder, "main.cpp", ["#include <torch/extension.h>", *cpp])
    cflags = [*common, *(call.get("extra_cflags") or [])]
    compiler = os.environ.get("CXX", "g++")
    _compile(name, folder, [compiler, "-fsyntax-only", "-std=c++20", "-fPIC", *cflags, "main.cpp"])
    cuda = _as_list(call["cuda"])
    if not cuda:
        return False
    nvcc = ["nvcc", "-c", "cuda.cu", "-o", "cuda.o", "-std=c++20", *_NVCC_FLAGS, *common]
    nvcc += call.get("extra_cuda_cflags") or []
    if light_headers(cuda):
        _write(folder, "cuda.cu", [*LIGHT_CUDA_HEADERS, *cuda])
        if _compile(name, folder, nvcc, last_try=False):
            return True
    _write(folder, "cuda.cu", ["#include <torch/types.h>", *LIGHT_CUDA_HEADERS, *cuda])
    _compile(name, folder, nvcc)
    return False


def _write(folder: str, name: str, lines: list[str]) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))


def _compile(name: str, folder: str, command: list[str], last_try: bool = True) -> bool:
    """Whether ``command`` succeeds in ``folder`` (a Failure on the ``last_try``)."""
    import subprocess

    done = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, errors="replace", check=False
    )
    if done.returncode == 0 or not last_try:
        return done.returncode == 0
    output = (done.stdout + done.stderr).strip()
    detail = f"$ {' '.join(command[:3])} ... ({name})\n{output}"
    raise Failure("compile_error", f"extension {name!r} does not compile", detail)


def _as_list(sources: Any) -> list[str]:
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else [str(source) for source in sources]
