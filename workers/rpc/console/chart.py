"""The lag chart: each shard's backlog over the last hour, as an inline SVG (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from workers.status import LagSample

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777")
WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 28


@dataclass(frozen=True, slots=True)
class Series:
    shard: str
    points: list[tuple[int, int]]
    """(sample time in ms, entries not yet applied)."""


def series_of(samples: Sequence[LagSample]) -> list[Series]:
    """One series per shard, in shard order (a shard missing from a sample is left out of it)."""
    shards = sorted({name for s in samples for name in s.lag}, key=lambda n: (len(n), n))
    return [Series(name, [(s.at_ms, s.lag[name]) for s in samples if name in s.lag]) for name in shards]


def lag_chart(samples: Sequence[LagSample], *, now_ms: int, span_s: int) -> str:
    """An SVG of each shard's lag over ``span_s`` up to ``now_ms``: a line per shard, a legend."""
    series = series_of(samples)
    top = max((lag for s in series for _, lag in s.points), default=0)
    y_max = max(1, top)
    start = now_ms - span_s * 1000
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at_ms: int) -> float:
        return LEFT + plot_w * max(0.0, min(1.0, (at_ms - start) / (span_s * 1000)))

    def y(lag: int) -> float:
        return TOP + plot_h * (1 - lag / y_max)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="capture lag per shard, last {span_s // 60} minutes">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#f8fafc" stroke="#cbd5e1"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end" font-size="11">{y_max}</text>',
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="11">0</text>',
        f'<text x="{LEFT}" y="{HEIGHT - 8}" font-size="11">-{span_s // 60} min</text>',
        f'<text x="{LEFT + plot_w}" y="{HEIGHT - 8}" text-anchor="end" font-size="11">now</text>',
    ]
    if not series:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" font-size="13" '
            'fill="#64748b">no samples yet (one every 30 s while an RPC runs)</text>'
        )
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        points = " ".join(f"{x(at):.1f},{y(lag):.1f}" for at, lag in s.points)
        parts.append(
            f'<polyline class="lag" data-shard="{escape(s.shard)}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{points}"/>'
        )
        if len(s.points) == 1:  # a single sample draws no line: a dot instead
            at, lag = s.points[0]
            parts.append(f'<circle cx="{x(at):.1f}" cy="{y(lag):.1f}" r="2.5" fill="{color}"/>')
        legend_x = LEFT + 8 + (i % 8) * 80
        parts.append(
            f'<text x="{legend_x}" y="{TOP + 14}" font-size="11" fill="{color}">shard {escape(s.shard)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


BAR_W, BAR_H = 360, 90


def usage_chart(tenant: str, values: Sequence[tuple[str, int]], *, what: str) -> str:
    """An SVG of one tenant's ``what`` per bucket: a bar each, oldest left, the largest labelled."""
    top = max((v for _, v in values), default=0)
    plot_w, plot_h = BAR_W - 40, BAR_H - 28
    step = plot_w / max(len(values), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {BAR_W} {BAR_H}" width="{BAR_W}" height="{BAR_H}" '
        f'role="img" aria-label="{escape(what)} of {escape(tenant)} per bucket">',
        f'<rect x="32" y="6" width="{plot_w}" height="{plot_h}" fill="#f8fafc" stroke="#cbd5e1"/>',
        f'<text x="28" y="16" text-anchor="end" font-size="10">{top}</text>',
        f'<text x="28" y="{6 + plot_h}" text-anchor="end" font-size="10">0</text>',
    ]
    if values:
        parts.append(f'<text x="32" y="{BAR_H - 6}" font-size="10">{escape(values[0][0])}</text>')
        last = escape(values[-1][0])
        parts.append(f'<text x="{32 + plot_w}" y="{BAR_H - 6}" text-anchor="end" font-size="10">{last}</text>')
    for i, (name, value) in enumerate(values):
        h = 0.0 if top <= 0 else plot_h * value / top
        parts.append(
            f'<rect class="usage" data-bucket="{escape(name)}" data-value="{value}" x="{32 + i * step + 1:.1f}" '
            f'y="{6 + plot_h - h:.1f}" width="{max(step - 2, 1):.1f}" height="{h:.1f}" fill="{PALETTE[0]}">'
            f"<title>{escape(name)}: {value}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)
