"""The benchmark maxcode times: one call of each function on inputs of a realistic size."""

from slowpkg import count_common, first_shared, grid_paths

ids = list(range(0, 12000, 3))
others = list(range(0, 12000, 7))
assert count_common(ids, others) == 572
assert first_shared(ids[::-1], others) == 11991
assert grid_paths(13, 13) == 2704156
