"""Plots as inline SVG: no JavaScript, no network, nothing to download."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 640, 300
MARGIN_LEFT, MARGIN_BOTTOM, MARGIN_TOP, MARGIN_RIGHT = 56, 40, 16, 16
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"]
STATUS_COLOURS = {
    "reference": "#7f7f7f",
    "correct": "#2ca02c",
    "incorrect": "#ff7f0e",
    "compile_error": "#d62728",
    "suspect": "#9467bd",
    "no_code": "#c7c7c7",
    "cut": "#e0c38c",
    "unevaluated": "#e0e0e0",
}


@dataclass(frozen=True)
class Series:
    """One line of a line chart."""

    name: str
    points: list[tuple[float, float]]


def line_chart(title: str, x_label: str, y_label: str, series: list[Series]) -> str:
    """A step-line chart (best reward so far against steps or evaluations)."""
    points = [point for line in series for point in line.points]
    if not points:
        return _empty(title)
    x_max = max(max(x for x, _ in points), 1.0)
    y_max = max(max(y for _, y in points) * 1.1, 1.5)
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def sx(x: float) -> float:
        return MARGIN_LEFT + plot_w * x / x_max

    def sy(y: float) -> float:
        return MARGIN_TOP + plot_h * (1 - y / y_max)

    parts = [_open(title), _axes(x_label, y_label)]
    for tick in _ticks(y_max):
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - MARGIN_RIGHT}" y1="{sy(tick):.1f}" '
            f'y2="{sy(tick):.1f}" stroke="#eee"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{sy(tick) + 4:.1f}" '
            f'text-anchor="end" font-size="11">{tick:g}x</text>'
        )
    for tick in _ticks(x_max, whole=True):
        parts.append(
            f'<text x="{sx(tick):.1f}" y="{HEIGHT - MARGIN_BOTTOM + 16}" text-anchor="middle" '
            f'font-size="11">{tick:g}</text>'
        )
    for index, line in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        path = []
        previous_y: float | None = None
        for x, y in sorted(line.points):
            if previous_y is not None:
                path.append(f"{sx(x):.1f},{sy(previous_y):.1f}")
            path.append(f"{sx(x):.1f},{sy(y):.1f}")
            previous_y = y
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(path)}">'
            f"<title>{escape(line.name)}</title></polyline>"
        )
        for x, y in line.points:
            parts.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(line.name)}: {y:.2f}x at {x:g}</title></circle>"
            )
        if len(series) > 1:
            parts.append(
                f'<text x="{WIDTH - MARGIN_RIGHT - 4}" y="{MARGIN_TOP + 14 + 14 * index}" '
                f'text-anchor="end" font-size="12" fill="{colour}">{escape(line.name)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class TreeNode:
    """A node of the search tree as drawn."""

    node_id: str
    parent_id: str | None
    depth: int
    status: str
    reward: float
    label: str


def tree_chart(title: str, nodes: list[TreeNode]) -> str:
    """The search tree: depth downwards, colour by status, size by reward."""
    if not nodes:
        return _empty(title)
    by_depth: dict[int, list[TreeNode]] = {}
    for node in nodes:
        by_depth.setdefault(node.depth, []).append(node)
    levels = max(by_depth) + 1
    widest = max(len(level) for level in by_depth.values())
    width = max(WIDTH, 40 + 26 * widest)
    height = max(160, 50 + 70 * levels)
    position: dict[str, tuple[float, float]] = {}
    for depth, level in by_depth.items():
        for index, node in enumerate(level):
            x = width * (index + 1) / (len(level) + 1)
            y = 30 + 70 * depth
            position[node.node_id] = (x, y)
    best_reward: float = max(node.reward for node in nodes) or 1.0
    parts = [
        f'<svg class="plot tree" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
    ]
    for node in nodes:
        if node.parent_id is not None and node.parent_id in position:
            (x1, y1), (x2, y2) = position[node.parent_id], position[node.node_id]
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#bbb"/>'
            )
    for node in nodes:
        cx, cy = position[node.node_id]
        radius = 4 + 10 * (node.reward / best_reward) ** 0.5
        colour = STATUS_COLOURS.get(node.status, "#999")
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}" fill="{colour}" stroke="#333" '
            f'stroke-width="0.5"><title>{escape(node.label)}</title></circle>'
        )
    legend_x = 10.0
    for status, colour in STATUS_COLOURS.items():
        parts.append(
            f'<circle cx="{legend_x + 5}" cy="{height - 12}" r="5" fill="{colour}"/>'
            f'<text x="{legend_x + 14}" y="{height - 8}" font-size="11">'
            f"{status.replace('_', ' ')}</text>"
        )
        legend_x += 20 + 7 * len(status)
    parts.append("</svg>")
    return "".join(parts)


def _open(title: str) -> str:
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
    )


def _axes(x_label: str, y_label: str) -> str:
    bottom = HEIGHT - MARGIN_BOTTOM
    return (
        f'<line x1="{MARGIN_LEFT}" y1="{bottom}" x2="{WIDTH - MARGIN_RIGHT}" y2="{bottom}" '
        f'stroke="#333"/><line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" '
        f'y2="{bottom}" stroke="#333"/><text x="{(WIDTH + MARGIN_LEFT) / 2}" y="{HEIGHT - 6}" '
        f'text-anchor="middle" font-size="12">{escape(x_label)}</text><text x="14" '
        f'y="{(HEIGHT - MARGIN_BOTTOM) / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {(HEIGHT - MARGIN_BOTTOM) / 2})">{escape(y_label)}</text>'
    )


def _ticks(maximum: float, whole: bool = False) -> list[float]:
    """Round tick values from 0 to ``maximum`` (whole numbers only for counts)."""
    step = 1.0
    for candidate in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if whole and candidate < 1:
            continue
        if maximum / candidate <= 8:
            step = candidate
            break
    ticks, value = [], 0.0
    while value <= maximum + 1e-9:
        ticks.append(round(value, 6))
        value += step
    return ticks


def _empty(title: str) -> str:
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="60">'
        f'<title>{escape(title)}</title><text x="10" y="30">no data yet</text></svg>'
    )
