"""The harness half that runs inside the sandbox for one KernelBench program (stdlib + torch).

The package is copied whole into the job's folder and started as ``python3 -I -B
JOB/harness/worker SPEC.json`` in a sandboxed process of its own, once for the reference and
once for the candidate, so the candidate can never patch the reference's code or the functions
that judge it. It imports no maxcode module; the parent imports ``protocol`` from it. It
produces *evidence*, not a verdict.

Its modules, in the order a run passes through them:

- ``__main__``: the entry point; lays the process out, then starts one run or a zygote.
- ``layout``: address-space randomization off (one re-execution), the layout shifted by the
  round's draw, no transparent huge pages. The worker never sets its CPUs (the sandbox's
  init forbids it): the parent moves it to the timing CPU before its first timed chunk.
- ``fork_server``: a side's zygote for an evaluation of several rounds (``--zygote``): imports
  torch once, forks the side's worker for each round and kills what the round left.
- ``main``: one run: the spec read, the model loaded and built, the parent's requests answered
  (warm-up, checks, timed calls, baselines), the report left in ``result.json``.
- ``launches``: a Triton candidate's own kernel launches counted (installed before its import).
- ``extensions``: the problem and the candidate imported (import = build of its C++/CUDA
  extensions), lighter CUDA builds, the compile check (sources compiled, nothing loaded).
- ``timing``: the warm-up and the timed chunks, with the heap reserved, inputs placed and
  chunks padded alike on both sides.
- ``conversation``: the worker's end of descriptor 3 (``Channel``), tensors sent in sealed
  memory files (``TensorParcel``), and the ``Failure`` a run reports.
- ``probes``: what is measured beside the timing, never judged: roofline, profile, NVTX range.
- ``protocol``: what both ends agree on: the spec, the names on descriptor 3, the memory files.

The seeds of the checked and timed inputs come from the parent over descriptor 3, just in time,
in JSON lines (tensors in memory files beside them): ``ready`` (answered with the check seeds),
``checked`` per check seed, then per chunk ``next`` (answered with its seeds on this worker's
turn, none when the phase is over), ``begin``, ``end`` (the calls' seconds) and ``outputs``
(every call's: the parent draws which it checks). The parent stamps every message with its own
clock, so a candidate that patches this process can at most lie about its own timings and
outputs, which are checked there.
"""
