"""The harness half that runs inside the sandbox for one KernelBench program (stdlib + torch).

The package is copied whole into the job's folder and started as ``python3 -I -B
JOB/harness/worker SPEC.json`` (``__main__``) in a sandboxed process of its own, once for the
reference and once for the candidate, so the candidate can never patch the reference's code or
the functions that judge it; an evaluation of several rounds starts it with ``--zygote`` once
per side instead (``zygote.serve``), which imports torch and forks the side's worker for each
round. It imports no maxcode module; the parent imports ``protocol`` from it (what both ends
agree on). It first re-executes itself with address-space randomization off and shifts its
layout by the round's draw (``layout.fix_layout``), so the two sides timed against each other
do not differ by their layout.

It produces *evidence*, not a verdict. The spec file holds only what building the model needs;
the seeds of the checked and timed inputs come from the parent over descriptor 3 (a socket),
just in time. The conversation there (JSON lines; tensors as sealed memory files beside the
line that describes them, ``Pack``):

- ``ready`` (seconds of one warmed-up call, output bytes); the parent answers with the check
  seeds.
- ``checked``, once per check seed (each run twice): outputs and changed inputs
  (``evidence.Checked``).
- per chunk of timed calls: ``next`` (the parent answers with the chunk's seeds when it is this
  worker's turn, none when the phase is over), ``begin`` and ``end`` (with the calls' in-process
  seconds) around the calls, then ``outputs`` with every call's outputs (the parent draws which
  it checks and never says).

The two workers take turns chunk by chunk on the timing CPU. The parent stamps every message
with its own clock, so a candidate that patches this process can at most lie about its own
timings and outputs, which are checked there.

Roles: ``reference`` (the problem's ``Model``; timing of eager, ``torch.compile`` when asked,
and an identity model for the harness's own overhead), ``candidate`` (``ModelNew``; import =
build of its extensions), ``build`` (import only, to fill the build cache), ``kernels`` (one
forward under Nsight Compute), ``compile_check`` (compile ``load_inline`` sources, not load).
"""
