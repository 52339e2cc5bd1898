"""Benchmarks of search methods over suites of tasks: ``maxcode bench``."""

from maxcode.api import answer_calls
from maxcode.bench.run import MAXCODE_SUFFIX, label_config, new_bench, run_bench
from maxcode.bench.suite import expand_suite
from maxcode.report.table import FAST_P, MethodRow, VoidRow, bench_json, bench_table, bench_void

__all__ = [
    "FAST_P",
    "MAXCODE_SUFFIX",
    "MethodRow",
    "VoidRow",
    "bench_json",
    "bench_table",
    "bench_void",
    "expand_suite",
    "label_config",
    "new_bench",
    "run_bench",
]


# ``maxcode.bench(...)`` is the Python API's ``bench`` even once this package is imported.
answer_calls(__name__, "bench")
