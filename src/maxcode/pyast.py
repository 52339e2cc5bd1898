"""Parsing Python source one thread at a time.

CPython 3.11 keeps the AST constructor's recursion depth in state that threads share: two
threads parsing at once can fail with ``SystemError: AST constructor recursion depth
mismatch`` (seen when a test loaded two KernelBench problems in two threads). maxcode parses
problems and candidates from executor threads, so every parse goes through ``parse``."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` of ``source``, holding the process's parse lock."""
    with _LOCK:
        return ast.parse(source, filename=filename)
