"""KernelBench problems: a PyTorch ``Model`` to replace with a faster ``ModelNew``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from maxcode.kinds.base import Kind, Occasion
from maxcode.kinds.kernelbench.rounds import REPORTED_PRECISION
from maxcode.types import KernelBenchDetails

if TYPE_CHECKING:
    from maxcode.harness.sandbox import Sandbox
    from maxcode.harness.settings import EvalSettings
    from maxcode.kinds.kernelbench.problem import KernelBenchTask
    from maxcode.tasks.model import Task
    from maxcode.types import Feedback


class KernelBenchKind(Kind):
    """A KernelBench problem file (``maxcode.kinds.kernelbench``), on a CPU or a GPU."""

    name = "kernelbench"
    title = "KernelBench"
    needs = (("cpu", ("torch", "g++", "ninja")), ("cuda", ("torch", "gpu", "nvcc", "ninja")))
    language = "python"
    extension = ".py"
    metrics = ("wall",)
    eval_precision = REPORTED_PRECISION
    in_folders = False  # a problem is its .py file (``tasks.kernelbench``)

    def device(self, requested: str) -> str:
        """``auto`` is ``cuda`` when PyTorch sees a GPU, else ``cpu``."""
        from maxcode.kinds.kernelbench.backends import resolve_device

        return resolve_device(requested)

    def device_note(self, device: str) -> str:
        from maxcode.kinds.kernelbench.backends import device_note

        return device_note(device)

    def ready(self, settings: EvalSettings) -> None:
        """PyTorch reaches the device and serves the backend (else a one-line error), so that
        a search fails before any LLM call is paid for."""
        from maxcode.kinds.kernelbench.backends import check_device

        check_device(settings.device, backend=settings.backend)

    def evaluate(
        self, task: Task, source: str, settings: EvalSettings, occasion: Occasion
    ) -> Feedback:
        from maxcode.kinds.kernelbench.evaluator import evaluate_kernelbench
        from maxcode.kinds.kernelbench.parameters import KernelBenchSettings

        own = KernelBenchSettings.of(
            settings,
            reported=occasion.reported,
            rounds=occasion.rounds,
            compile_only=occasion.compile_only,
            bar=occasion.bar,
            precision=occasion.precision,
        )
        problem = _problem(task)
        return evaluate_kernelbench(
            problem, source, settings=own, sandbox=occasion.sandbox, cpu=occasion.cpu
        )

    def prebuild(
        self, task: Task, source: str, settings: EvalSettings, sandbox: Sandbox | None
    ) -> Feedback | None:
        from maxcode.kinds.kernelbench.backends import needs_build
        from maxcode.kinds.kernelbench.evaluator import build_kernelbench
        from maxcode.kinds.kernelbench.parameters import KernelBenchSettings

        if not needs_build(source):
            return None
        own = KernelBenchSettings(device=settings.device)
        return build_kernelbench(_problem(task), source, settings=own, sandbox=sandbox)

    def critique(self, feedback: Feedback) -> str:
        """Rules of thumb for a correct candidate, read off its profile and roofline."""
        from maxcode.kinds.kernelbench.worker.probes import OWN_CODE

        diagnosis = f"Diagnosis: correct and {feedback.speedup:.2f}x faster than eager PyTorch."
        suggestions = []
        profile = feedback.profiles.get("candidate")
        if profile is not None and profile.top:
            first = profile.top[0]
            diagnosis += f" {first.share:.0%} of its time is in {first.name}."
            if profile.launches > 1.5:
                unit = "kernels" if profile.clock == "cuda" else "operators"
                suggestions.append(
                    f"- It runs {profile.launches:.0f} {unit} per call: fuse them into one "
                    "custom kernel that reads the input once and writes the output once."
                )
            if first.name == OWN_CODE:
                suggestions.append(
                    "- Most of the time is in its own code: make that kernel faster (vectorise "
                    "its inner loop, read each input once, avoid temporaries)."
                )
            else:
                suggestions.append(
                    f"- Write {first.name} as a custom kernel specialised to these shapes."
                )
        details = feedback.kernelbench or KernelBenchDetails()
        roofline = details.roofline
        if roofline is not None and roofline.fraction is not None and not roofline.capped:
            diagnosis += f" It runs at {roofline.fraction:.0%} of the task's speed of light."
            if roofline.bound() == "memory" and roofline.fraction < 0.5:
                suggestions.append(
                    f"- The task is memory-bound ({roofline.bytes / 1e6:.2f} MB per call): read "
                    "each input once with wide, coalesced loads and write the output once."
                )
            elif roofline.bound() == "compute" and roofline.fraction < 0.5:
                suggestions.append(
                    f"- The task is compute-bound ({roofline.flops / 1e9:.3f} GFLOP per call): "
                    "tile the products so operands are reused from registers and shared memory."
                )
        own = [kernel for kernel in details.kernel_metrics if not kernel.library]
        if own and own[0].occupancy is not None and own[0].occupancy < 0.3:
            suggestions.append(
                f"- {own[0].name[:60]} reaches {own[0].occupancy:.0%} occupancy: use more "
                "threads per block or fewer registers and less shared memory per thread."
            )
        vs_compile = details.speedup_vs_compile
        if vs_compile is not None and vs_compile < 1:
            suggestions.append(
                f"- torch.compile is still {1 / vs_compile:.2f}x faster: it "
                "fuses the operators; a hand-fused kernel should at least match it."
            )
        suggestions.append("- Keep memory access contiguous and avoid temporaries between steps.")
        return diagnosis + "\nSuggestions:\n" + "\n".join(suggestions)


def _problem(task: Task) -> KernelBenchTask:
    from maxcode.kinds.kernelbench.problem import KernelBenchTask

    if not isinstance(task, KernelBenchTask):
        raise TypeError(f"{task.name} is a {task.kind} task, not a KernelBench problem")
    return task
