"""Reports: self-contained HTML for a run or a bench."""

from maxcode.report.html import bench_report, run_report
from maxcode.search.tree import load_tree

__all__ = ["bench_report", "load_tree", "run_report"]
