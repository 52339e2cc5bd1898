"""The bundled KernelBench problems against hand-written custom kernels.

CPU: each problem's C++ ``ModelNew`` (``tests/fixtures/kernelbench/<problem>/cpu.py``) is built
with ``load_inline`` inside the sandbox and must be correct; the builds are made once for the
module (two at a time) and a second evaluation must reuse its cached build. The default suite
builds one of them (``QUICK``), ``MAXCODE_TEST_SLOW=1`` all six.
CUDA (``gpu`` marker, opt-in with ``MAXCODE_TEST_GPU=1`` on a machine with a GPU): each
problem's CUDA ``ModelNew`` must be correct, and a side-stream cheat must gain nothing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from maxcode.harness.integrity import void_findings
from maxcode.kinds import evaluate_task, prebuild_task
from maxcode.kinds.kernelbench import ncu
from maxcode.kinds.kernelbench.problem import kernelbench_suite
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import REPO

pytest.importorskip("torch")

EXAMPLES = REPO / "examples" / "kernelbench"
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
PROBLEMS = kernelbench_suite(EXAMPLES)
QUICK = {"1_ScaledGELU"}
"""Problems whose CPU kernels the default suite builds; the others with ``MAXCODE_TEST_SLOW=1``.
The quick one includes only the torch headers it uses: about 20 s to build here, against 45-50 s
through ``torch/extension.h`` (most of a build is g++ reading torch's headers)."""
BUILT = [p for p in PROBLEMS if p.stem in QUICK or os.environ.get("MAXCODE_TEST_SLOW") == "1"]
# A missing header stops g++ while it reads the file, before it parses torch's headers (about
# 40 s here for any extension): the compile error costs a second, not a second build.
BROKEN_CPP = """import torch
from torch.utils.cpp_extension import load_inline

_kernel = load_inline(
    name="maxcode_test_broken",
    cpp_sources='#include "undefined_name.h"\ntorch::Tensor run(torch::Tensor x) { return x; }',
    functions=["run"],
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _kernel.run(x)
"""


def _evaluate(problem: Path, source: str) -> Feedback:
    return evaluate_task(load_task(str(problem)), source, repeats=10)


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """Every CPU fixture built (two at a time) and evaluated once, the first one a second time,
    and a candidate whose C++ does not compile; all sharing one build cache."""
    home = tmp_path_factory.mktemp("kernelbench-home")
    saved = os.environ.get("MAXCODE_HOME")
    os.environ["MAXCODE_HOME"] = str(home)
    try:
        jobs = [(problem, (FIXTURES / problem.stem / "cpu.py").read_text()) for problem in BUILT]
        jobs.append((PROBLEMS[0], BROKEN_CPP))
        # Builds two at a time; the timed evaluations one at a time, on the CPU every
        # evaluation of the machine takes turns on (the default, ``turns.cpu_turn``). Two
        # evaluations timed at once would each see the other's load, which the integrity
        # checks may rightly void; pinned to the first CPU instead, the honest kernel of
        # 1_ScaledGELU shared it with what the suite's other worker ran unpinned, beside that
        # worker's timing on the last, and scored 0 once (a fresh clone, 2026-11-29).
        with ThreadPoolExecutor(max_workers=2) as pool:
            built = list(pool.map(lambda job: prebuild_task(load_task(str(job[0])), job[1]), jobs))
        feedback = [_evaluate(problem, source) for problem, source in jobs]
        builds = sorted(home.glob("cache/kernelbench/cand-*/extensions/**/*.so"))
        stamps = {path: path.stat().st_mtime_ns for path in builds}
        # A build killed half-way leaves torch's lock file behind; it must not stall the next.
        for folder in home.glob("cache/kernelbench/cand-*/extensions/*/"):
            (folder / "lock").touch()
        task = dataclasses.replace(load_task(str(PROBLEMS[0])), timeout_s=120)
        again = evaluate_task(task, jobs[0][1], repeats=10, profile=True)
        task = load_task(str(PROBLEMS[0]))
        prebuilt = {
            "cached": prebuild_task(task, jobs[0][1]),
            "broken": built[-1],
            "nothing to build": prebuild_task(task, "class ModelNew: pass\n"),
        }
        yield {
            "prebuilt": prebuilt,
            "feedback": dict(zip([problem.stem for problem in BUILT], feedback)),
            "broken": feedback[-1],
            "builds": stamps,
            "again": again,
        }
    finally:
        if saved is None:
            os.environ.pop("MAXCODE_HOME", None)
        else:
            os.environ["MAXCODE_HOME"] = saved


def test_six_bundled_problems_in_kernelbench_format() -> None:
    assert [problem.name.split("_", 1)[0] for problem in PROBLEMS] == [str(n) for n in range(1, 7)]
    for problem in PROBLEMS:
        task = load_task(str(problem))
        assert task.kind == "kernelbench" and task.description
        assert (FIXTURES / problem.stem / "cpu.py").is_file()
        assert (FIXTURES / problem.stem / "cuda.py").is_file()


@pytest.mark.parametrize(
    "problem",
    [
        pytest.param(problem.stem, marks=() if problem.stem in QUICK else pytest.mark.slow)
        for problem in PROBLEMS
    ],
)
def test_the_cpu_kernel_of_each_problem_is_correct(
    cpu_results: dict[str, object], problem: str
) -> None:
    feedback = cpu_results["feedback"][problem]  # type: ignore[index]
    assert feedback.compiled, feedback.compile_output
    assert feedback.correct, feedback.error
    assert feedback.kernelbench.timings["candidate"].trials >= 10
    # The bundled problems are sound tasks: none of the screening findings fires.
    assert not [flag for flag in feedback.flags if flag.startswith("task:")], feedback.flags
    # An honest kernel leaves complete host evidence: no finding voids its reward.
    assert feedback.suspect is None and not void_findings(feedback.flags), feedback.flags


def test_a_cached_build_is_reused_even_after_a_killed_build(
    cpu_results: dict[str, object],
) -> None:
    builds = cpu_results["builds"]
    assert len(builds) == len(BUILT)  # type: ignore[arg-type]
    again = cpu_results["again"]
    assert again.correct  # type: ignore[attr-defined]
    for path, stamp in builds.items():  # type: ignore[attr-defined]
        assert path.stat().st_mtime_ns == stamp, f"{path} was rebuilt"


def test_the_profile_of_an_extension_shows_its_own_code_and_the_critic_reads_it(
    cpu_results: dict[str, object],
) -> None:
    """On a CPU the profiler records PyTorch's operators only; the extension's own function,
    where an honest kernel spends its time, is the profile's ``OWN_CODE`` entry, not a share
    of the output it allocates (which the critic would then advise writing as a kernel)."""
    from maxcode.kinds import kind_named
    from maxcode.kinds.kernelbench.worker.probes import OWN_CODE

    again: Feedback = cpu_results["again"]  # type: ignore[assignment]
    assert again.correct
    top = again.profiles["candidate"].top
    assert top[0].name == OWN_CODE, top
    assert 0.9 <= sum(op.share for op in top) <= 1.0 + 1e-9
    advice = kind_named("kernelbench").critique(again)
    assert "its own code" in advice and "Write aten::" not in advice


def test_a_build_step_apart_from_the_evaluation_reuses_the_cache_and_reports_failures(
    cpu_results: dict[str, object],
) -> None:
    prebuilt = cpu_results["prebuilt"]
    assert prebuilt["cached"] is None and prebuilt["nothing to build"] is None  # type: ignore[index]
    broken = prebuilt["broken"]  # type: ignore[index]
    assert not broken.compiled and "undefined_name" in broken.compile_output
    for path, stamp in cpu_results["builds"].items():  # type: ignore[attr-defined]
        assert path.stat().st_mtime_ns == stamp, f"{path} was rebuilt"


def test_a_cpp_compile_error_is_reported_with_the_compiler_output(
    cpu_results: dict[str, object],
) -> None:
    broken = cpu_results["broken"]
    assert not broken.compiled and broken.error.kind == "compile_error"  # type: ignore[attr-defined]
    assert "undefined_name" in broken.compile_output  # type: ignore[attr-defined]
    assert len(broken.compile_output) < 4200  # type: ignore[attr-defined]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [problem.stem for problem in PROBLEMS])
def test_the_cuda_kernel_of_each_problem_is_correct(problem: str) -> None:
    source = (FIXTURES / problem / "cuda.py").read_text()
    task = load_task(str(EXAMPLES / f"{problem}.py"))
    feedback = evaluate_task(task, source, device="cuda", compile_baseline=True)
    assert feedback.compiled, feedback.compile_output
    assert feedback.correct, feedback.error
    assert feedback.device == "cuda" and feedback.kernelbench.timings["candidate"].trials >= 100
    print(
        f"{problem}: eager {feedback.kernelbench.timings['reference'].median_s * 1e3:.4f} ms, "
        f"compile {feedback.kernelbench.timings['compile'].median_s * 1e3:.4f} ms, "
        f"candidate {feedback.kernelbench.timings['candidate'].median_s * 1e3:.4f} ms, "
        f"speedup {feedback.speedup:.2f}x "
        f"(vs compile {feedback.kernelbench.speedup_vs_compile:.2f}x)"
    )


@pytest.mark.gpu
def test_work_on_a_side_stream_is_timed() -> None:
    cheats = FIXTURES / "cheats"
    task = load_task(str(cheats / "problem.py"))
    feedback = evaluate_task(task, (cheats / "side_stream.py").read_text(), device="cuda")
    # Ten times the work on a side stream: either the output was read before it was ready
    # (wrong), or the device-wide sync put the work inside the timed calls. How much slower
    # that makes it is a speed, measured by benchmarks/gpu_fixtures.py (fixture side_stream).
    assert feedback.compiled, feedback.compile_output
    assert not feedback.correct or feedback.kernelbench.timings["candidate"].trials > 0


@pytest.mark.gpu
def test_a_candidate_that_skips_an_input_is_capped_at_the_speed_of_light() -> None:
    """The candidate never reads the 512 MiB input the task gives: faster than moving the
    task's bytes once from device memory, which no honest kernel can be. (The input is that
    large because a timed call costs at least ~40 us on the H100 tried, the device-wide sync
    included: with 128 MiB the floor was 47 us, the candidate measured 43 us, within the
    slack.)"""
    from maxcode.kinds.kernelbench.roofline import ROOFLINE_SLACK

    cheats = FIXTURES / "cheats"
    task = load_task(str(cheats / "skip_problem.py"))
    feedback = evaluate_task(task, (cheats / "skip_input.py").read_text(), device="cuda")
    roofline = feedback.kernelbench.roofline
    assert feedback.correct and roofline is not None
    print(f"skip_input: {roofline.summary()}; {feedback.speedup:.2f}x; {feedback.flags}")
    assert roofline.capped and any("speed of light" in flag for flag in feedback.flags)
    ceiling = feedback.kernelbench.timings["reference"].median_s / (
        roofline.memory_floor_s / ROOFLINE_SLACK
    )
    assert feedback.speedup <= ceiling * (1 + 1e-9)


@pytest.mark.gpu
@pytest.mark.skipif(ncu.find_ncu() is None, reason="ncu (Nsight Compute) is not installed")
def test_nsight_compute_measures_the_candidates_own_kernel() -> None:
    source = (FIXTURES / "1_ScaledGELU" / "cuda.py").read_text()
    task = load_task(str(EXAMPLES / "1_ScaledGELU.py"))
    feedback = evaluate_task(task, source, device="cuda", profile=True)
    assert feedback.correct, feedback.error
    for kernel in feedback.kernelbench.kernel_metrics:
        print(kernel.summary(), "[library]" if kernel.library else "")
    print(
        feedback.kernelbench.kernel_metrics_note,
        feedback.kernelbench.roofline,
        feedback.profile_seconds,
    )
    own = [kernel for kernel in feedback.kernelbench.kernel_metrics if not kernel.library]
    assert own, feedback.kernelbench.kernel_metrics_note
    assert own[0].name.startswith("scaled_gelu_kernel") and own[0].launches == 1
    assert own[0].duration_s > 0 and own[0].dram_bytes
    for share in (own[0].occupancy, own[0].memory_throughput, own[0].compute_throughput):
        assert share is not None and 0 < share <= 1.0
    assert feedback.kernelbench.roofline is not None and not feedback.kernelbench.roofline.capped
    assert feedback.kernelbench.roofline.bound() == "memory"
    assert feedback.profiles["candidate"].clock == "cuda"


def _nvcc_missing() -> bool:
    return shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file()


requires_nvcc = pytest.mark.skipif(_nvcc_missing(), reason="nvcc (the CUDA toolkit) is missing")
BROKEN_CUDA = '''import torch
from torch.utils.cpp_extension import load_inline

_kernel = load_inline(
    name="maxcode_test_broken_cuda",
    cpp_sources="torch::Tensor run(torch::Tensor x);",
    cuda_sources="""
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + missing_bias;
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    twice<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
""",
    functions=["run"],
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _kernel.run(x)
'''


def _compile_check(problem: str, source: str) -> Feedback:
    task = load_task(str(EXAMPLES / f"{problem}.py"))
    return evaluate_task(task, source, device="cuda", compile_only=True)


@requires_nvcc
@pytest.mark.slow  # about 30 s of nvcc
def test_a_cuda_candidate_that_does_not_compile_is_named_by_nvcc_without_a_gpu() -> None:
    feedback = _compile_check(PROBLEMS[0].stem, BROKEN_CUDA)
    assert not feedback.compiled and feedback.error is not None
    assert feedback.error.kind == "compile_error"
    assert "missing_bias" in feedback.error.message and "cuda.cu(" in feedback.error.message


@requires_nvcc
@pytest.mark.parametrize(
    "problem",
    [
        # About two minutes each (nvcc on torch's headers): opt-in, to keep the default suite
        # within its budget; the nvcc path is still exercised by default by the test above
        # (a CUDA candidate that does not compile is named by nvcc).
        pytest.param(problem.stem, marks=[pytest.mark.slow])
        for problem in PROBLEMS
    ],
)
def test_the_cuda_kernels_compile_without_a_gpu(problem: str) -> None:
    """Each bundled CUDA ModelNew goes through nvcc (about a minute each here: the first one by
    default, the others with the slow tests)."""
    feedback = _compile_check(problem, (FIXTURES / problem / "cuda.py").read_text())
    assert feedback.compiled, feedback.compile_output
    assert not feedback.correct and feedback.speedup == 0.0
    assert any(flag.startswith("compile-only: extensions compiled") for flag in feedback.flags)


def test_only_cuda_sources_that_name_nothing_of_torch_are_built_without_its_headers() -> None:
    from maxcode.kinds.kernelbench.worker import extensions

    kernel = "__global__ void twice(float* x, int n) { x[0] *= 2.0f; }"
    assert extensions.light_headers([kernel, "void launch(float* x, cudaStream_t s);"])
    assert not extensions.light_headers([])  # no CUDA sources: nothing to build
    for named in (
        "#include <torch/extension.h>",
        "at::Tensor run(at::Tensor x);",
        "c10::Half h;",
        "#include <ATen/cuda/CUDAContext.h>",
        "AT_DISPATCH_FLOATING_TYPES(t, name, [&] {});",
        "TORCH_CHECK(n > 0);",
    ):
        assert not extensions.light_headers([kernel, named]), named


@requires_nvcc
@pytest.mark.slow  # 50-100 s here, most of it g++ on torch/extension.h for the C++ wrapper
def test_a_cuda_source_without_torch_compiles_without_its_headers() -> None:
    """The kernel and a launcher on plain pointers: nvcc never parses torch's headers (on an
    H100 machine such a candidate built in 18 s, one with torch's headers in its CUDA source
    in 67 s)."""
    source = (FIXTURES / "1_ScaledGELU" / "cuda_light.py").read_text()
    feedback = _compile_check("1_ScaledGELU", source)
    assert feedback.compiled, feedback.compile_output
    wanted = "maxcode_fixture_scaled_gelu_light without torch's headers"
    assert any(wanted in flag for flag in feedback.flags), feedback.flags


NEEDS_A_STANDARD_HEADER = '''import torch
from torch.utils.cpp_extension import load_inline

_kernel = load_inline(
    name="maxcode_test_std_vector",
    cpp_sources="""
void launch(float* x, long n);
torch::Tensor run(torch::Tensor x) {
    auto y = x.clone();
    launch(y.data_ptr<float>(), y.numel());
    return y;
}
""",
    cuda_sources="""
__global__ void twice(float* x, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
void launch(float* x, long n) {
    std::vector<int> blocks{static_cast<int>((n + 255) / 256)};
    twice<<<blocks[0], 256>>>(x, n);
}
""",
    functions=["run"],
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _kernel.run(x)
'''


@requires_nvcc
@pytest.mark.slow  # nvcc on torch's headers, after the light build fails
def test_a_cuda_source_that_needs_a_header_torch_brought_in_is_built_with_torch_headers() -> None:
    feedback = _compile_check(PROBLEMS[0].stem, NEEDS_A_STANDARD_HEADER)
    assert feedback.compiled, feedback.compile_output
    assert any("(maxcode_test_std_vector)" in flag for flag in feedback.flags), feedback.flags


def test_load_inline_is_given_light_headers_only_where_they_can_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's wrapper of ``load_inline`` (installed on a GPU before the candidate is
    imported), against a stand-in for torch's that records its calls and fails where asked."""
    import torch.utils.cpp_extension as extension

    from maxcode.kinds.kernelbench.worker import extensions

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    failing = {"light": False}

    def recorded(*args: Any, **options: Any) -> str:
        calls.append((args, options))
        if failing["light"] and options.get("no_implicit_headers"):
            raise RuntimeError("error: 'vector' is not a member of 'std'")
        return "module"

    monkeypatch.setattr(extension, "load_inline", recorded)
    extensions.light_cuda_builds()
    kernel = "__global__ void k(float* x) { x[0] = 1.0f; }"
    assert extension.load_inline("a", "void f();", kernel, functions=["f"]) == "module"
    ((args, options),) = calls
    assert args[1][0] == "#include <torch/extension.h>" and args[1][1:] == ["void f();"]
    assert args[2] == [*extensions.LIGHT_CUDA_HEADERS, kernel]
    assert options == {"functions": ["f"], "no_implicit_headers": True}
    calls.clear()
    for unchanged in (
        (("b", "void f();", kernel + " // torch::Tensor"), {}),  # names torch
        (("c", "void f();", kernel, None, ["f"]), {}),  # positional options
        (("d", "void f();", kernel), {"no_implicit_headers": True}),  # the candidate's choice
        (("e", "void f();", None), {}),  # no CUDA sources
    ):
        extension.load_inline(*unchanged[0], **unchanged[1])
        assert calls.pop() == unchanged
    failing["light"] = True
    extension.load_inline("f", "void f();", kernel, functions=["f"])
    light, again = calls
    assert light[1]["no_implicit_headers"] and again == (
        ("f", "void f();", kernel),
        {"functions": ["f"]},
    )
