"""Plots drawn on the server as inline SVG: no script, no front-end build, readable by any
browser and any screenshot. A plot is a pure function of its points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

_WIDTH, _HEIGHT = 720, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 44, 36
_Axis = Callable[[int], float]
_Scale = Callable[[float], float]
_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    """One value per x label; `None` where there is nothing to draw (no fires that minute)."""


def plot_svg(
    title: str, x_labels: Sequence[str], series: Sequence[Series], unit: str, *, bars: bool = False
) -> str:
    """An SVG chart of `series` over `x_labels` (shown at most eight of them), with a y axis in
    `unit` from zero to the largest value; bars for counts, lines for measures."""
    top = max((v for s in series for v in s.values if v is not None), default=0.0) or 1.0
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    count = max(len(x_labels), 1)

    def x(index: int) -> float:
        return _LEFT + (index + 0.5) * plot_w / count

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg class="plot" role="img" aria-label="{escape(title)}" width="{_WIDTH}" '
        f'height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{_LEFT}" y="16" class="plot-title">{escape(title)}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_WIDTH - _RIGHT}" y2="{_TOP + plot_h}" '
        'stroke="#999"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        value = top * fraction
        parts.append(
            f'<text x="{_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" '
            f'class="plot-axis">{_number(value)} {escape(unit)}</text>'
        )
    step = max(1, count // 8)
    for index in range(0, len(x_labels), step):
        parts.append(
            f'<text x="{x(index):.1f}" y="{_HEIGHT - 14}" text-anchor="middle" '
            f'class="plot-axis">{escape(x_labels[index])}</text>'
        )
    for number, one in enumerate(series):
        colour = _COLOURS[number % len(_COLOURS)]
        parts += _bars(one, x, y, plot_w / count, colour) if bars else _line(one, x, y, colour)
        parts.append(
            f'<text x="{_LEFT + 130 * number}" y="34" style="fill: {colour}" '
            f'class="plot-legend">■ {escape(one.name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _line(one: Series, x: _Axis, y: _Scale, colour: str) -> list[str]:
    """A line through the points, and a dot on each: a lone minute is a dot, not nothing."""
    points = [(x(i), y(v)) for i, v in enumerate(one.values) if v is not None]
    if not points:
        return []
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return [
        f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
        f'data-series="{escape(one.name)}" points="{path}"/>',
        *(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{colour}"/>' for px, py in points),
    ]


def _bars(one: Series, x: _Axis, y: _Scale, slot: float, colour: str) -> list[str]:
    width = max(1.0, slot * 0.8)
    bottom = y(0.0)
    return [
        f'<rect x="{x(i) - width / 2:.1f}" y="{y(v):.1f}" width="{width:.1f}" '
        f'height="{bottom - y(v):.1f}" fill="{colour}" data-series="{escape(one.name)}"/>'
        for i, v in enumerate(one.values)
        if v
    ]


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
