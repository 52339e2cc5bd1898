"""``python3 -I -B JOB/harness/worker ARGUMENT``: one worker run (ARGUMENT: its spec file) or
a side's zygote (``protocol.ZYGOTE``)."""

import importlib
import os
import sys

if __name__ == "__main__":
    # The folder above this one, so that the worker imports as a package (``-I`` put this
    # folder on the path, not that one).
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    layout = importlib.import_module("worker.layout")
    layout.no_huge_pages()
    layout.fix_layout()
    if sys.argv[1] == importlib.import_module("worker.protocol").ZYGOTE:
        sys.exit(importlib.import_module("worker.fork_server").serve())
    sys.exit(importlib.import_module("worker.main").main(sys.argv[1]))
