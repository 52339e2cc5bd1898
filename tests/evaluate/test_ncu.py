"""Nsight Compute output to kernel metrics.

``torch_randn_mul_sum.csv`` is real ``ncu --csv`` output, captured on an H100 (ncu 2025.3.1)
profiling ``torch.randn(1 << 22, device="cuda")``, ``* 2`` and ``.sum()`` with the metric set
of ``maxcode.kinds.kernelbench.ncu.METRICS``; the end-to-end run under ncu is a ``gpu`` test in
``test_kernelbench_examples.py``.
"""

from __future__ import annotations

import pytest

from maxcode.kinds.kernelbench import ncu
from tests.helpers import REPO

CAPTURED = REPO / "tests" / "fixtures" / "ncu" / "torch_randn_mul_sum.csv"
HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)


def row(launch: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return (
        f'"{launch}","7","python3","127.0.0.1","{kernel}","1","7","(256, 1, 1)","(64, 1, 1)",'
        f'"0","9.0","Command line profiler metrics","{metric}","{unit}","{value}"'
    )


def launch_rows(launch: int, kernel: str, ns: str, occupancy: str, memory: str) -> list[str]:
    return [
        row(launch, kernel, "gpu__time_duration.sum", "ns", ns),
        row(launch, kernel, "sm__warps_active.avg.pct_of_peak_sustained_active", "%", occupancy),
        row(
            launch,
            kernel,
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "%",
            memory,
        ),
        row(launch, kernel, "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.50"),
        row(launch, kernel, "dram__bytes.sum", "Mbyte", "8.39"),
    ]


def test_captured_ncu_output_gives_each_kernel_its_figures() -> None:
    kernels = ncu.parse_csv(CAPTURED.read_text())
    assert len(kernels) == 3
    # Longest first: the random-number kernel (16,576 ns), the sum (13,376), the multiply.
    assert [round(k.duration_s * 1e9) for k in kernels] == [16576, 13376, 11296]
    randn, total, multiply = kernels
    assert "normal" in randn.name and "reduce_kernel" in total.name
    assert "MulFunctor" in multiply.name
    assert multiply.occupancy == pytest.approx(0.7146)
    assert multiply.memory_throughput == pytest.approx(0.4838)
    assert multiply.compute_throughput == pytest.approx(0.0610)
    assert multiply.dram_bytes == 18_249_728
    assert total.occupancy == pytest.approx(0.9065)
    # None of them is named in the candidate's code: all PyTorch's.
    assert all(kernel.library and kernel.launches == 1 for kernel in kernels)
    assert ncu.base_name(multiply.name) == "vectorized_elementwise_kernel"
    assert ncu.base_name("void ns::gelu<float, 4>(const float *)") == "gelu"
    assert ncu.base_name("scaled_gelu_kernel(const float *, float *, int)") == (
        "scaled_gelu_kernel"
    )


def test_launches_of_one_kernel_merge_with_time_weighted_shares() -> None:
    own = "scaled_gelu_kernel(const float *, float *, int)"
    text = "\n".join(
        [
            "==PROF== Connected to process 7",
            HEADER,
            *launch_rows(0, own, "1,000", "50.00", "80.00"),
            *launch_rows(1, own, "3,000", "90.00", "40.00"),
            *launch_rows(2, "void at::native::vectorized_elementwise_kernel<4>", "500", "60", "20"),
        ]
    )
    kernels = ncu.parse_csv(text, source="__global__ void scaled_gelu_kernel(const float* x)")
    assert [kernel.name for kernel in kernels] == [own, kernels[1].name]
    mine = kernels[0]
    assert mine.launches == 2 and not mine.library
    assert mine.duration_s == pytest.approx(4e-6)
    assert mine.occupancy == pytest.approx((0.5 * 1 + 0.9 * 3) / 4)
    assert mine.memory_throughput == pytest.approx((0.8 * 1 + 0.4 * 3) / 4)
    assert mine.compute_throughput == pytest.approx(0.125)
    assert mine.dram_bytes == 2 * 8_390_000
    assert kernels[1].library
    assert "scaled_gelu_kernel" in mine.summary() and "occupancy 80%" in mine.summary()


def test_output_without_measurements_gives_no_kernels_and_a_reason() -> None:
    denied = (
        "==PROF== Connected to process 9\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0.\n"
    )
    assert ncu.parse_csv(denied) == []
    assert "ERR_NVGPUCTRPERM" in ncu.failure_note(denied)
    assert ncu.failure_note("==ERROR== the application crashed\n") == (
        "ncu: the application crashed"
    )
    assert ncu.parse_csv(HEADER + "\n" + row(0, "k", "gpu__time_duration.sum", "ns", "n/a")) == []


def test_the_command_profiles_only_the_forward_range_with_the_fixed_metrics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = ncu.command(tmp_path / "ncu", tmp_path / "log.csv", "maxcode_forward")
    assert argv[0] == str(tmp_path / "ncu")
    assert argv[argv.index("--nvtx-include") + 1] == "maxcode_forward/"
    assert argv[argv.index("--metrics") + 1].split(",") == list(ncu.METRICS)
    assert argv[argv.index("--log-file") + 1] == str(tmp_path / "log.csv")
