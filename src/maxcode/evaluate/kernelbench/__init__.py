"""KernelBench evaluation: a PyTorch reference ``Model`` against a candidate ``ModelNew``.

Where things are:

- ``evaluator``: one evaluation start to end (``evaluate_kernelbench``, ``build_kernelbench``).
- ``runner``: sandboxed worker runs, the job folder, the secret seeds.
- ``channel``: the conversation on a worker's descriptor 3 (seeds just in time, host time
  stamps, the timed calls' outputs).
- ``evidence``: the typed records a worker hands over (report, tensors, messages).
- ``judge``: comparison and verdict (through ``integrity.Verdict``).
- ``roofline``: the speed of light and the Nsight Compute profile.
- ``worker``: the half that runs in the sandbox (no maxcode imports: it is copied and run
  with ``python3 -I``).
"""

from maxcode.evaluate.kernelbench.evaluator import (
    build_kernelbench,
    check_device,
    device_note,
    evaluate_kernelbench,
    needs_build,
    resolve_device,
)
from maxcode.evaluate.kernelbench.roofline import ROOFLINE_SLACK
from maxcode.evaluate.kernelbench.settings import KernelBenchSettings

__all__ = [
    "ROOFLINE_SLACK",
    "KernelBenchSettings",
    "build_kernelbench",
    "check_device",
    "device_note",
    "evaluate_kernelbench",
    "needs_build",
    "resolve_device",
]
