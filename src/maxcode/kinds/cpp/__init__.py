"""C++ programs (PIE format): a reference program and its input/output tests.

- ``kind``: the kind's face to the rest of maxcode (``CppKind``).
- ``evaluate_cpp``: build, run every test in the sandbox, compare, time in turns.
- ``rewrites``: the offline proposer's C++ rewrites.
- ``templates``: the policy's and critic's prompts.
"""
