"""The worker's process laid out alike on both sides: address-space randomization off, the
layout shifted by the round's draw, no transparent huge pages (the parent, not the worker,
moves its threads to the timing CPU: the sandbox forbids a run to). Stdlib only, and no import
of its package's modules (a test loads it on its own)."""

from __future__ import annotations

import os
import sys

_ADDR_NO_RANDOMIZE = 0x0040000
"""personality(2) flag: the process's address space is laid out the same way in every run."""


def call_libc(name: str, *arguments: int) -> int:
    """The C library's ``name`` called with ``arguments``; -1 when it cannot be called."""
    try:
        import ctypes

        return int(getattr(ctypes.CDLL(None, use_errno=True), name)(*arguments))
    except (OSError, AttributeError):
        return -1


def _personality(persona: int = 0xFFFFFFFF) -> int:
    """personality(2): sets ``persona``, returns the previous one (the default only asks)."""
    return call_libc("personality", persona)


_PR_SET_THP_DISABLE = 41


def no_huge_pages() -> None:
    """Transparent huge pages off for this process and what it executes (prctl(2), kept across
    execve): whether a process got them was a draw per process. The judge checks (``memory``)."""
    call_libc("prctl", _PR_SET_THP_DISABLE, 1, 0, 0, 0)


def fix_layout() -> None:
    """Re-execute this worker once with address-space randomization off, before torch loads,
    then shift the layout by the round's draw (``shift_layout``), the same on both sides: a
    random layout biases a process for its whole life, which pairs cannot cancel; drawn per
    round, rounds sample it. Where personality(2) is refused, the worker runs as it is."""
    stack, pages, heap = layout_draw()
    if os.environ.get(_LAYOUT_SET) is None:
        persona = _personality()
        if (
            persona != -1
            and not persona & _ADDR_NO_RANDOMIZE
            and _personality(persona | _ADDR_NO_RANDOMIZE) != -1
        ):
            os.environ[_LAYOUT_SET] = "1"
            # The stack starts below the environment's strings: this one moves it.
            os.environ["MAXCODE_LAYOUT_PAD"] = "." * stack
            try:
                os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
            except OSError:
                _personality(persona)  # could not start again: go on as this process is
    shift_layout(pages, heap)


_LAYOUT_SET = "MAXCODE_LAYOUT_SET"


def layout_draw() -> tuple[int, int, int]:
    """The round's shift, from ``MAXCODE_LAYOUT_SEED`` (0 when absent): bytes of environment
    below the stack's start (16-byte steps, up to 64 KiB), pages reserved before the next
    mappings (up to 16 MiB), bytes of heap allocated first (16-byte steps, up to 2 MiB)."""
    try:
        seed = int(os.environ.get("MAXCODE_LAYOUT_SEED", "0"))
    except ValueError:
        seed = 0
    return (seed & 0xFFF) * 16, (seed >> 12) & 0xFFF, ((seed >> 24) & 0x1FFFF) * 16


_PROT_NONE, _MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0, 0x02, 0x20, 0x4000


def shift_layout(pages: int, heap: int) -> None:
    """Move where later mappings and heap allocations land: an inaccessible reservation of
    ``pages``, and a heap block of ``heap`` bytes, both kept for the life of the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = libc.malloc.restype = ctypes.c_void_p
        whole, size, number = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        libc.mmap.argtypes = [whole, size, number, number, number, ctypes.c_long]
        libc.malloc.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return
    if pages:
        flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE
        libc.mmap(None, pages * 4096, _PROT_NONE, flags, -1, 0)
    if heap:
        libc.malloc(heap)
