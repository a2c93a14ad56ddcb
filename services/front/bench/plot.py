"""The curves of ``horizon bench --scale`` as a markdown table and a small hand-written SVG line plot.

Two panels side by side: decisions/s and scheduling cycle p99 (ms) against the backlog (log scale),
one line per node count. No plotting library: a few ``<polyline>``s, axes, ticks and a legend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["curves_table", "curves_svg"]

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def curves_table(curves: Sequence[dict[str, Any]]) -> str:
    """One row per node count, one column pair (decisions/s, cycle p99 ms) per backlog."""
    nodes = sorted({c["nodes"] for c in curves})
    backlogs = sorted({c["backlog"] for c in curves})
    cell = {(c["nodes"], c["backlog"]): c for c in curves}
    head = "| nodes × 8 GPUs | " + " | ".join(f"backlog {b:,}: decisions/s, cycle p99 ms" for b in backlogs) + " |"
    lines = [head, "| --- |" + " --- |" * len(backlogs)]
    for n in nodes:
        row = []
        for b in backlogs:
            c = cell.get((n, b))
            if c is None:
                row.append("not run")
            elif c.get("error"):
                row.append("failed")
            else:
                row.append(f"{_fmt(c.get('jobs_per_s'))}; {_fmt(c.get('cycle_p99_ms'))}")
        lines.append(f"| {n:,} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _panel(curves: Sequence[dict[str, Any]], key: str, title: str, x0: float, width: float, height: float) -> list[str]:
    left, top, bottom, right = x0 + 70, 40, height - 50, x0 + width - 20
    backlogs = sorted({c["backlog"] for c in curves})
    values = [c[key] for c in curves if c.get(key) is not None]
    ymax = _nice_max(max(values, default=1.0))
    lo, hi = math.log10(min(backlogs)), math.log10(max(backlogs))
    span = (hi - lo) or 1.0

    def x(b: float) -> float:
        return left + (math.log10(b) - lo) / span * (right - left) if hi > lo else (left + right) / 2

    def y(v: float) -> float:
        return bottom - v / ymax * (bottom - top)

    out = [f'<text x="{(left + right) / 2:.0f}" y="22" text-anchor="middle" font-weight="bold">{title}</text>',
           f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for b in backlogs:
        out.append(f'<line x1="{x(b):.1f}" y1="{bottom}" x2="{x(b):.1f}" y2="{bottom + 4}" stroke="black"/>')
        out.append(f'<text x="{x(b):.1f}" y="{bottom + 18}" text-anchor="middle">{b:,}</text>')
    out.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 38}" text-anchor="middle">backlog (queued jobs, log scale)</text>')
    for i, n in enumerate(sorted({c["nodes"] for c in curves})):
        colour = _COLOURS[i % len(_COLOURS)]
        points = [(x(c["backlog"]), y(c[key])) for c in sorted(curves, key=lambda c: c["backlog"])
                  if c["nodes"] == n and c.get(key) is not None]
        if len(points) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                       + " ".join(f"{px:.1f},{py:.1f}" for px, py in points) + '"/>')
        out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in points]
        out.append(f'<rect x="{right - 130}" y="{top + 4 + 18 * i}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{right - 112}" y="{top + 15 + 18 * i}">{n:,} nodes</text>')
    return out


def curves_svg(curves: Sequence[dict[str, Any]], title: str = "horizon bench --scale") -> str:
    """Decisions/s and cycle p99 against the backlog, one line per node count, as an SVG document."""
    width, height = 900, 380
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 20}" '
            f'font-family="sans-serif" font-size="12">', f'<title>{title}</title>',
            '<rect width="100%" height="100%" fill="white"/>']
    if curves:
        body += _panel(curves, "jobs_per_s", "decisions/s (sustained)", 0, width / 2, height)
        body += _panel(curves, "cycle_p99_ms", "scheduling cycle p99 (ms)", width / 2, width / 2, height)
    body.append("</svg>")
    return "\n".join(body) + "\n"
