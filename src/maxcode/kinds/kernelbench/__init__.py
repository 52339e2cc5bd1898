"""KernelBench problems: a PyTorch reference ``Model`` against a candidate ``ModelNew``.

Where things are:

- ``kind``: the kind's face to the rest of maxcode (``KernelBenchKind``).
- ``problem``, ``scaling``: a problem file loaded, and its sizes scaled.
- ``evaluator``: one evaluation start to end (``evaluate_kernelbench``, ``build_kernelbench``).
- ``runner``: sandboxed worker runs, the job folder, the secret seeds.
- ``channel``: the conversation on a worker's descriptor 3 (seeds just in time, host time
  stamps, the timed calls' outputs).
- ``evidence``: the typed records a worker hands over (report, tensors, messages).
- ``judge``: comparison and verdict (through ``integrity.Verdict``).
- ``roofline``, ``ncu``: the speed of light and the Nsight Compute profile.
- ``worker``: the half that runs in the sandbox (no maxcode imports: it is copied and run
  with ``python3 -I``).
- ``templates``: the policy's and critic's prompts.
"""
