"""KernelBench: a PyTorch reference ``Model`` against a candidate ``ModelNew``, judged by a
harness the candidate's code cannot reach. One evaluation, from its entry to its verdict:

1. ``kind`` (``KernelBenchKind``) is the face the rest of maxcode calls. ``problem`` reads the
   problem file without running it, ``scaling`` scales its sizes (``--scale``), ``backends``
   checks that this machine serves the device and kernel language asked for.
2. ``evaluator.evaluate_kernelbench`` runs the rounds (one to screen a search's candidate;
   for a reported number ``rounds.LEAST_ROUNDS`` and more until the interval is narrow) under
   the settings and constants of ``parameters``; each round is ``evaluator._one_round``.
   Before the first, ``headers`` has torch's header precompiled for the flags the
   candidate's builds name, which its workers see read-only.
3. A round starts from fresh secret seeds (``runner.Seeds``); the check and timed seeds stay in
   the parent until the worker may have them. ``runner`` writes the read-only job folder and
   runs the reference's and the candidate's sandboxed workers at once: each a run of the
   ``worker`` package (copied, no maxcode import; its docstring tells the worker's side), or on
   a CPU over several rounds a fork of a zygote per side (``runner.Zygotes``). Both time on
   the timing CPU, which the round holds alone through its timing window (``turns.CpuTurn``):
   taken at once when free (the workers start there), else awaited at the first timed chunk
   while the workers start up and check on another CPU (``runner.WorkerRunner.elsewhere``).
   The parent moves each worker to the timing CPU before its first timed chunk (``cpuclock.pin``
   from outside: no run may change its own CPUs, the sandbox's init forbids it).
4. ``listener`` serves each worker's descriptor 3 (``Conversation``): seeds just in time,
   every message stamped by the parent's clock and the worker's CPU clock (``cpuclock``: read
   from ``/proc``). The messages are ``evidence``'s typed records; one out of order or
   malformed ends the conversation (an ``evidence`` finding: void).
5. ``schedule.Round`` is what the two conversations share: the plan of timed calls
   (``TimedPlan``: the kept outputs drawn only after their calls ran), the turns (``Turns``:
   reference chunk n, then candidate chunk n on the same seeds, the other side blocked), when
   to stop (``Stopping``: the speedup's 95% interval within 2%, or a cap), and the outputs,
   compared as they come (``outputs``: sealed memory files, mapped a window at a time, that no
   process can change once sealed).
6. When both runs are over, each is read into an ``evidence.Ran`` (report, sandbox result,
   conversation), and ``judge`` turns the pair into one verdict (``integrity.Verdict``): the
   reference must have run (else the task's error), then the findings its docstring lists in
   order. ``roofline`` caps a CUDA candidate faster than the speed of light; ``ncu`` profiles
   its kernels when asked.
7. ``rounds`` combines the rounds' verdicts into one speedup with its interval; a round void
   only by a statistical finding (``hidden``) must be repeated by fresh workers to stand.

Beside the evaluation: ``templates`` (the policy's and the critic's prompts) and ``rewrites``
(the offline proposer's rewrites of a problem).
"""
