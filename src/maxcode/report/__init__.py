"""Reports: self-contained HTML for a run or a bench."""

from maxcode.report.html import bench_report, load_tree, run_report

__all__ = ["bench_report", "load_tree", "run_report"]
