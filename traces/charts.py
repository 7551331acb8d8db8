"""Server-side SVG charts: geometry computed here, markup in templates.

No JavaScript and no inline style: every shape is positioned by SVG attributes
and coloured by a CSS class, so the pages keep the strict CSP. Labels go through
template autoescaping like all other text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

LABEL_W = 150
BAR_W = 330
VALUE_W = 90
ROW_GAP = 8
BAR_H = 12


@dataclass(frozen=True)
class Shape:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"
    css: str = ""


@dataclass
class Chart:
    """What ``traces/_chart.svg`` draws."""

    title: str
    width: float
    height: float
    shapes: list[Shape] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    empty: bool = False


def _fmt(value: float) -> str:
    if value >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.1f}"


def bar_chart(
    title: str,
    rows: Sequence[tuple[str, Sequence[float]]],
    *,
    series: Sequence[str],
    stacked: bool = False,
    fmt: Callable[[float], str] = _fmt,
    maximum: float | None = None,
) -> Chart:
    """Horizontal bars, one row per label; several series grouped or stacked."""
    count = 1 if stacked else max(1, len(series))
    row_h = BAR_H * count + ROW_GAP
    chart = Chart(
        title=title,
        width=LABEL_W + BAR_W + VALUE_W,
        height=max(row_h * len(rows), row_h) + 24,
        legend=[(name, f"series-{i}") for i, name in enumerate(series)],
        empty=not rows,
    )
    if stacked:
        top = max((sum(values) for _, values in rows), default=0.0)
    else:
        top = max((max(values, default=0.0) for _, values in rows), default=0.0)
    top = maximum if maximum is not None else top
    scale = BAR_W / top if top > 0 else 0.0
    for index, (label, values) in enumerate(rows):
        y0 = index * row_h + 4
        chart.texts.append(
            Text(LABEL_W - 6, y0 + BAR_H * count / 2 + 4, label[:24], "end", "label")
        )
        x = float(LABEL_W)
        for number, value in enumerate(values):
            width = max(value * scale, 1.0 if value > 0 else 0.0)
            y = y0 if stacked else y0 + number * BAR_H
            chart.shapes.append(
                Shape(
                    round(x, 2),
                    y,
                    round(width, 2),
                    BAR_H - 2,
                    f"series-{number}",
                    f"{label} · {series[number]}: {fmt(value)}",
                )
            )
            if stacked:
                x += width
            else:
                chart.texts.append(
                    Text(LABEL_W + width + 4, y + BAR_H - 3, fmt(value), css="value")
                )
        if stacked:
            total = sum(values)
            chart.texts.append(Text(x + 4, y0 + BAR_H - 3, fmt(total), css="value"))
    return chart


def column_chart(
    title: str,
    columns: Sequence[tuple[str, Sequence[float]]],
    *,
    series: Sequence[str],
    fmt: Callable[[float], str] = _fmt,
) -> Chart:
    """Vertical stacked columns (e.g. tokens per day, one segment per model)."""
    plot_h = 160
    left = 56
    width = max(420, left + 26 * len(columns) + 10)
    chart = Chart(
        title=title,
        width=width,
        height=plot_h + 46,
        legend=[(name, f"series-{i}") for i, name in enumerate(series)],
        empty=not columns,
    )
    top = max((sum(values) for _, values in columns), default=0.0)
    scale = plot_h / top if top > 0 else 0.0
    chart.texts.append(Text(left - 6, 14, fmt(top), "end", "axis"))
    chart.texts.append(Text(left - 6, plot_h + 8, "0", "end", "axis"))
    step = (width - left - 10) / max(1, len(columns))
    bar_w = max(4.0, min(22.0, step - 4))
    for index, (label, values) in enumerate(columns):
        x = left + index * step + (step - bar_w) / 2
        y = plot_h + 4.0
        for number, value in enumerate(values):
            height = value * scale
            if height <= 0:
                continue
            y -= height
            chart.shapes.append(
                Shape(
                    round(x, 2),
                    round(y, 2),
                    round(bar_w, 2),
                    round(height, 2),
                    f"series-{number}",
                    f"{label} · {series[number]}: {fmt(value)}",
                )
            )
        if len(columns) <= 14 or index % max(1, len(columns) // 10) == 0:
            chart.texts.append(
                Text(x + bar_w / 2, plot_h + 20, label[5:], "middle", "axis")
            )
    return chart
