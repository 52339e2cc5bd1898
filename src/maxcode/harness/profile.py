"""Profiles of C++ candidates: where the instructions go, line by line, and how the caches fare.

A correct candidate is built again with debug information and run once under valgrind's
callgrind with cache simulation, on its costliest test. The dump is read here: instructions
(``Ir``) and first-level and last-level data-cache misses per source line of the candidate,
instructions per function, and the program's miss rates. The result feeds the critic; it is
never part of the reward.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from maxcode.types import CppProfile, FunctionShare, HotLine

_TOP_LINES = 5
_TOP_FUNCTIONS = 5
_TOP_MISSES = 3
_LINE_TEXT = 80


@dataclass
class CallgrindCounts:
    """The event counts of one callgrind dump (``--compress-strings=no --compress-pos=no``)."""

    events: list[str] = field(default_factory=list)
    """Event names in the order of the cost columns (``Ir Dr Dw I1mr D1mr ...``)."""
    totals: list[int] = field(default_factory=list)
    """The whole program's counts (the dump's summary line)."""
    by_line: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    """Self counts per (source file, line)."""
    by_function: dict[str, int] = field(default_factory=dict)
    """Self instructions per function."""

    def event(self, counts: list[int], name: str) -> int:
        """One event's count in a cost list (0 when the dump does not have that event)."""
        if name not in self.events:
            return 0
        position = self.events.index(name)
        return counts[position] if position < len(counts) else 0


def parse_callgrind(text: str) -> CallgrindCounts:
    """Self costs per line and per function from a callgrind dump.

    A cost line right after ``calls=`` is the inclusive cost of that call, charged to the
    call site: it is skipped, so every line and function holds its own work only.
    """
    counts = CallgrindCounts()
    by_line: defaultdict[tuple[str, int], list[int]] = defaultdict(list)
    by_function: defaultdict[str, int] = defaultdict(int)
    file_name = inlined = function = ""
    after_call = False
    for raw in text.splitlines():
        if not raw:
            continue
        head = raw[0]
        if head.isdigit() or head == "+" or head == "-":
            if after_call:
                after_call = False
                continue
            parts = raw.split()
            try:
                line = int(parts[0])
                costs = [int(part) for part in parts[1:]]
            except ValueError:
                continue
            key = (inlined or file_name, line)
            total = by_line[key]
            if len(total) < len(costs):
                total.extend([0] * (len(costs) - len(total)))
            for position, cost in enumerate(costs):
                total[position] += cost
            if costs:
                by_function[function] += costs[0]
        elif raw.startswith("events:"):
            counts.events = raw.split()[1:]
        elif raw.startswith("summary:") or raw.startswith("totals:"):
            counts.totals = [int(part) for part in raw.split()[1:]]
        elif raw.startswith("fl="):
            file_name, inlined = raw[3:], ""
        elif raw.startswith(("fi=", "fe=")):
            inlined = "" if raw[3:] == file_name else raw[3:]
        elif raw.startswith("fn="):
            function, inlined = raw[3:], ""
        elif raw.startswith("calls="):
            after_call = True
    counts.by_line = dict(by_line)
    counts.by_function = dict(by_function)
    return counts


def cpp_profile(counts: CallgrindCounts, source: str, source_name: str) -> CppProfile:
    """The candidate's hot lines, hot functions and cache behaviour, from a parsed dump."""
    lines = source.splitlines()
    instructions = counts.event(counts.totals, "Ir") or sum(counts.by_function.values())

    def text_of(line: int) -> str:
        return lines[line - 1].strip()[:_LINE_TEXT] if 0 < line <= len(lines) else ""

    own = {
        line: costs
        for (path, line), costs in counts.by_line.items()
        if path == source_name or path.endswith("/" + source_name)
    }
    merged: dict[int, list[int]] = {}
    for line, costs in own.items():
        merged[line] = costs

    def misses(costs: list[int]) -> int:
        return counts.event(costs, "D1mr") + counts.event(costs, "D1mw")

    def hot(line: int) -> HotLine:
        costs = merged[line]
        return HotLine(
            line=line,
            share=counts.event(costs, "Ir") / max(instructions, 1),
            text=text_of(line),
            l1_misses=misses(costs),
        )

    by_instructions = sorted(
        merged, key=lambda line: counts.event(merged[line], "Ir"), reverse=True
    )
    by_misses = sorted(
        (line for line in merged if misses(merged[line]) > 0),
        key=lambda line: misses(merged[line]),
        reverse=True,
    )
    functions = sorted(counts.by_function.items(), key=lambda item: item[1], reverse=True)
    accesses = counts.event(counts.totals, "Dr") + counts.event(counts.totals, "Dw")
    l1 = counts.event(counts.totals, "D1mr") + counts.event(counts.totals, "D1mw")
    last_level = counts.event(counts.totals, "DLmr") + counts.event(counts.totals, "DLmw")
    simulated = "D1mr" in counts.events and accesses > 0
    return CppProfile(
        instructions=instructions,
        hot_lines=[hot(line) for line in by_instructions[:_TOP_LINES]],
        functions=[
            FunctionShare(name=name[:_LINE_TEXT], share=cost / max(instructions, 1))
            for name, cost in functions[:_TOP_FUNCTIONS]
            if cost > 0
        ],
        l1_miss_rate=l1 / accesses if simulated else None,
        last_level_miss_rate=last_level / accesses if simulated else None,
        missing_lines=[hot(line) for line in by_misses[:_TOP_MISSES]],
    )
