"""The harness: what every task kind shares to judge a candidate (each kind's own evaluation
lives in its folder under ``maxcode.kinds``).

In the order an evaluation uses them:

- ``settings``: the settings of an evaluation (``EvalSettings``, ``EvalRequest``).
- ``sandbox``: where candidate code runs (bubblewrap or namespaces, limits, a scratch folder).
- ``build``: a C++ program compiled once per source and flags, cached.
- ``runs``: one sandboxed run of a program and what it tells (exit, limits, output).
- ``compare``: a program's output against the expected output, token by token.
- ``turns``: timing in alternating turns, on a pinned CPU, within a budget.
- ``stats``: speedup intervals and the stop rules of timing.
- ``profile``: where a C++ program spends its time (perf, callgrind).
- ``integrity``: findings and their consequence (``Verdict``, ``apply_policy``).
"""
