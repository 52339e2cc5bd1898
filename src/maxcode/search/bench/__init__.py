"""Search methods compared over suites of tasks (``maxcode bench``, ``maxcode.bench``).

- ``suite``: the tasks of a suite (folders of tasks, PIE files, KernelBench levels).
- ``run``: one bench: each method on each task with the same budget, recorded in the store.
- ``table``: the comparison (geometric means, fast_p, ranks, voids) as a table and as JSON.
"""
