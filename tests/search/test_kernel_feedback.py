"""What the critic and the trajectory get from kernel metrics and the roofline (CUDA figures
as an H100 gave them; the evaluations that produce them are ``gpu`` tests)."""

from __future__ import annotations

from maxcode.kinds import KINDS
from maxcode.search.observation import describe_feedback
from maxcode.types import Feedback, KernelMetrics, Roofline


def _feedback() -> Feedback:
    return Feedback(
        task="1_ScaledGELU",
        metric="wall",
        compiled=True,
        correct=True,
        speedup=1.5,
        reference_cost=70e-6,
        candidate_cost=46.8e-6,
        tests_total=3,
        tests_passed=3,
        device="cuda",
        roofline=Roofline(
            flops=0,
            bytes=8_388_608,
            flop_rate=5.1e13,
            byte_rate=2.81e12,
            floor_s=2.98e-6,
            memory_floor_s=2.98e-6,
            fraction=0.064,
        ),
        kernel_metrics=[
            KernelMetrics(
                name="scaled_gelu_kernel(const float *, float *, long, float, float)",
                launches=1,
                duration_s=7.3e-6,
                occupancy=0.25,
                memory_throughput=0.19,
                compute_throughput=0.46,
                dram_bytes=8_400_000,
            ),
            KernelMetrics(
                name="void at::native::fill_kernel", launches=1, duration_s=1e-6, library=True
            ),
        ],
    )


def test_the_prompt_and_the_trajectory_line_carry_kernels_and_the_speed_of_light() -> None:
    feedback = _feedback()
    text = describe_feedback(feedback)
    assert "Kernels of the candidate's forward (Nsight Compute" in text
    assert "scaled_gelu_kernel" in text and "occupancy 25%, memory 19%, compute 46%" in text
    assert "fill_kernel: 1.0 us [library]" in text
    assert "Roofline: speed of light 0.0030 ms (memory-bound: 8.39 MB" in text
    assert "candidate at 6% of it" in text
    line = feedback.summary()
    assert "kernel scaled_gelu_kernel" in line and "19% memory, 46% compute" in line
    assert line.endswith("6% of the speed of light")


def test_the_template_critic_reads_the_roofline_and_the_occupancy() -> None:
    critique = KINDS["kernelbench"].critique(_feedback())
    assert "6% of the task's speed of light" in critique
    assert "memory-bound (8.39 MB per call)" in critique
    assert "reaches 25% occupancy" in critique


def test_without_ncu_the_note_stands_in_for_the_kernels() -> None:
    feedback = _feedback().with_kernelbench(
        kernel_metrics=[], kernel_metrics_note="no ncu (Nsight Compute) here"
    )
    text = describe_feedback(feedback)
    assert "Kernel metrics: no ncu (Nsight Compute) here." in text
    assert "Kernels of the candidate's forward" not in text
