"""``python -m maxcode``: the same command line as ``maxcode``."""

from maxcode.cli import run_cli

run_cli()
