"""Inline SVG bar charts of a case's figures: normal against serialised, per io_mode and step count.

Each bar is the median over the variants of its group (rows, stores, loads,
layouts and remote memories differ within one); a whisker spans their min to max.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

COLOURS = {"normal": "#4e79a7", "serialised": "#e8762b"}
BYTE_SCALES = ((1, "B"), (2**10, "KiB"), (2**20, "MiB"), (2**30, "GiB"))
SECOND_SCALES = ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s"))

WIDTH, HEIGHT = 460, 240
# How far past the tallest bar a whisker may reach before the axis stops following it.
REACH = 2.5
LEFT, RIGHT, TOP, BOTTOM = 58, 10, 40, 46


def ticks(top: float, scales: Sequence[tuple[float, str]]) -> list[tuple[float, str]]:
    """Round axis ticks from 0 past `top`, labelled in the largest unit the last reaches: (value, label) pairs."""
    top = top if top > 0 else scales[0][0]  # all zero: an axis of one smallest unit
    scale = max((s for s, _ in scales if top >= s), default=scales[0][0])
    span = max(top / scale, 1e-12)
    raw = span / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    values = [i * step * scale for i in range(math.ceil(span / step - 1e-9) + 1)]
    # The last tick may reach the next unit (1000 µs): the labels use it then (0.25 ms ... 1 ms).
    scale, unit = max(((s, u) for s, u in scales if values[-1] >= s), default=scales[0])
    return [(v, f"{round(v / scale, 6):g} {unit}") for v in values]


def _text(x: float, y: float, body: str, anchor: str = "middle", size: int = 12, extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{extra}>{escape(body)}</text>'


def _axis_top(per_group: Sequence[Mapping[str, Any]]) -> tuple[float, bool]:
    """The figure the axis must reach, and whether whiskers are cut there.

    Whiskers up to REACH times the tallest bar are shown whole; farther ones (one
    slow run among fast ones) would flatten every bar, so they are cut at the top.
    """
    tallest = max(s["median"] for per in per_group for s in per.values() if s is not None)
    reach = max(s["max"] for per in per_group for s in per.values() if s is not None)
    if tallest > 0 and reach > REACH * tallest:
        return tallest * 1.25, True
    return reach, False


def bar_chart(
    title: str,
    groups: Sequence[Mapping[str, Any]],
    figure: str,
    scales: Sequence[tuple[float, str]],
    describe: Callable[[float | None], str],
) -> str:
    """An SVG of `figure` (e.g. `device_bytes`) per group, a bar each for normal and serialised.

    `groups` are a case summary's groups; `describe` formats one value for tooltips.
    """
    stats = [(g, {p: g.get(f"{figure}_{p}") for p in COLOURS}) for g in groups]
    if all(s is None for _, per in stats for s in per.values()):
        return f'<p class="muted">{escape(title)}: not measured.</p>'
    reach, cut = _axis_top([per for _, per in stats])
    axis = ticks(reach, scales)
    y = _Scale(axis[-1][0] or 1.0)
    label = f"{title}: normal and serialised per io_mode and step count"
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        *_frame(title, cut, axis, y),
    ]
    width = (WIDTH - LEFT - RIGHT) / len(stats)
    bar = min(width * 0.36, 30)
    previous_mode = None
    for i, (g, per) in enumerate(stats):
        centre = LEFT + width * (i + 0.5)
        if g["io_mode"] != previous_mode:
            # The io_mode names its run of groups, centred under them, with a rule before it.
            run = sum(1 for other, _ in stats if other["io_mode"] == g["io_mode"])
            bold = ' font-weight="600"'
            parts.append(_text(LEFT + width * (i + run / 2), y.base + 34, g["io_mode"], "middle", 12, bold))
            if previous_mode is not None:
                x = LEFT + width * i
                parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{y.base + 38}" class="sep"/>')
            previous_mode = g["io_mode"]
        steps = g["steps"]
        parts.append(_text(centre, y.base + 16, f"{steps} step" + ("s" if steps != 1 else ""), "middle", 11))
        if not g["measured"]:
            parts.append(_text(centre, y.base - 6, "not run", "middle", 10, ' class="note"'))
        parts += _bars(g, per, centre, bar, y, describe)
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y.base}" y2="{y.base}" class="axis"/>')
    parts.append("</svg>")
    return "".join(parts)


class _Scale:
    """The plot's vertical scale: a figure's height in the SVG, the axis reaching `top`."""

    def __init__(self, top: float) -> None:
        self.top = top
        self.height = HEIGHT - TOP - BOTTOM
        self.base = TOP + self.height

    def __call__(self, value: float) -> float:
        return self.base - self.height * min(value, self.top) / self.top


def _frame(title: str, cut: bool, axis: Sequence[tuple[float, str]], y: _Scale) -> list[str]:
    """The chart's title, the note on cut whiskers, the legend and the grid lines with their labels."""
    parts = [_text(4, 16, title, "start", 14, ' font-weight="600"')]
    if cut:
        parts.append(_text(4, 31, "\u25b2 range goes past the top (hover a bar)", "start", 10, ' class="note"'))
    for i, (program, colour) in enumerate(COLOURS.items()):
        key = WIDTH - RIGHT - 170 + i * 82
        parts.append(f'<rect x="{key}" y="7" width="11" height="11" fill="{colour}"/>')
        parts.append(_text(key + 15, 17, program, "start", 12))
    for value, text in axis:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>')
        parts.append(_text(LEFT - 5, y(value) + 4, text if value else "0", "end", 11))
    return parts


def _bars(
    g: Mapping[str, Any],
    per: Mapping[str, Any],
    centre: float,
    bar: float,
    y: _Scale,
    describe: Callable[[float | None], str],
) -> list[str]:
    """One group's bars, normal and serialised, each with its tooltip, whisker and cut mark."""
    parts = []
    for j, program in enumerate(COLOURS):
        s = per[program]
        if s is None:
            continue
        x = centre + (j - 1) * bar * 1.08 + bar * 0.04
        tip = (
            f"{g['io_mode']}, {g['steps']} steps, {program}: {describe(s['median'])} "
            f"(median of {g['measured']}; {describe(s['min'])} to {describe(s['max'])})"
        )
        height = max(y.base - y(s["median"]), 0.5)
        parts.append(
            f'<rect x="{x:.1f}" y="{y.base - height:.1f}" width="{bar:.1f}" height="{height:.1f}" '
            f'fill="{COLOURS[program]}"><title>{escape(tip)}</title></rect>'
        )
        mid, lo, hi = x + bar / 2, y(s["min"]), y(s["max"])
        if s["max"] > s["min"]:
            parts.append(
                f'<path d="M{mid:.1f} {lo:.1f}V{hi:.1f}M{mid - 3:.1f} {lo:.1f}h6M{mid - 3:.1f} {hi:.1f}h6" '
                'class="whisker"/>'
            )
        if s["max"] > y.top:
            parts.append(f'<path d="M{mid - 4:.1f} {hi + 1:.1f}l4 -7l4 7z" class="cut"/>')
    return parts
