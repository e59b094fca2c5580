"""Helpers of the ``charts`` skill: bar, line, scatter and histogram charts saved as files.

Runs in the sandbox. With matplotlib (Agg backend, no display) each chart is the PNG asked for;
without it, a plain SVG written with the standard library beside it (same name, ``.svg``). Every
helper returns the path it wrote.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    HAS_MATPLOTLIB = True
except ImportError:
    plt = None
    HAS_MATPLOTLIB = False

Series = Sequence[float] | Mapping[str, Sequence[float]]
WIDTH, HEIGHT = 800, 450
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 80, 30, 50, 70
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")


def bar_chart(
    labels: Sequence[Any],
    values: Sequence[float],
    path: str = "artifacts/chart.png",
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    horizontal: bool = False,
) -> str:
    """Bars of ``values`` named by ``labels``; returns the path written."""
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels but {len(values)} values")
    names = [str(label) for label in labels]
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, max(3.0, 0.35 * len(names))) if horizontal else (8, 4.5))
        if horizontal:
            ax.barh(names[::-1], list(values)[::-1], color=PALETTE[0])
        else:
            ax.bar(names, values, color=PALETTE[0])
            if max((len(name) for name in names), default=0) * len(names) > 60:
                ax.tick_params(axis="x", labelrotation=45)
        return _save(fig, ax, path, title, xlabel, ylabel)
    svg = _Svg(title, xlabel, ylabel)
    svg.bars(names, [float(value) for value in values])
    return svg.write(path)


def line_chart(
    x: Sequence[Any],
    series: Series,
    path: str = "artifacts/chart.png",
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """One line per series (a list of values, or {name: values}) over ``x``; returns the path written."""
    named = _named(series)
    for name, values in named.items():
        if len(values) != len(x):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(x)} x values")
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ticks = [str(value) for value in x]
        for index, (name, values) in enumerate(named.items()):
            ax.plot(ticks, values, marker="o", label=name or None, color=PALETTE[index % len(PALETTE)])
        if len(named) > 1:
            ax.legend()
        return _save(fig, ax, path, title, xlabel, ylabel)
    svg = _Svg(title, xlabel, ylabel)
    svg.lines([str(value) for value in x], {name: [float(v) for v in values] for name, values in named.items()})
    return svg.write(path)


def scatter_chart(
    x: Sequence[float],
    y: Sequence[float],
    path: str = "artifacts/chart.png",
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """A point per (x, y) pair; returns the path written."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} x values but {len(y)} y values")
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.scatter(x, y, s=14, alpha=0.7, color=PALETTE[0])
        return _save(fig, ax, path, title, xlabel, ylabel)
    svg = _Svg(title, xlabel, ylabel)
    svg.points([float(v) for v in x], [float(v) for v in y])
    return svg.write(path)


def histogram(
    values: Sequence[float],
    path: str = "artifacts/chart.png",
    *,
    bins: int = 20,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "count",
) -> str:
    """The distribution of ``values`` in ``bins`` equal-width bins; returns the path written."""
    numbers = [float(value) for value in values if value is not None and not math.isnan(float(value))]
    if not numbers:
        raise ValueError("no values to plot")
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.hist(numbers, bins=bins, color=PALETTE[0], edgecolor="white")
        return _save(fig, ax, path, title, xlabel, ylabel)
    low, high = min(numbers), max(numbers)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for number in numbers:
        counts[min(int((number - low) / width), bins - 1)] += 1
    svg = _Svg(title, xlabel, ylabel)
    svg.bars([f"{low + i * width:.3g}" for i in range(bins)], [float(count) for count in counts])
    return svg.write(path)


def _named(series: Series) -> dict[str, list[float]]:
    if isinstance(series, Mapping):
        return {str(name): [float(v) for v in values] for name, values in series.items()}
    return {"": [float(v) for v in series]}


def _save(fig: Any, ax: Any, path: str, title: str, xlabel: str, ylabel: str) -> str:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    _make_parent(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _make_parent(path: str) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)


class _Svg:
    """A minimal SVG chart: axes, a y scale from zero (or the data's minimum), and the marks."""

    def __init__(self, title: str, xlabel: str, ylabel: str) -> None:
        self.parts: list[str] = []
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
        self.plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        self.low, self.high = 0.0, 1.0

    def _scale(self, values: Sequence[float], from_zero: bool = True) -> None:
        low, high = min(values, default=0.0), max(values, default=1.0)
        self.low = min(0.0, low) if from_zero else low
        self.high = high if high > self.low else self.low + 1.0

    def _y(self, value: float) -> float:
        return MARGIN_TOP + self.plot_h * (1 - (value - self.low) / (self.high - self.low))

    def _axes(self, ticks: Sequence[tuple[float, str]]) -> None:
        bottom = MARGIN_TOP + self.plot_h
        self.parts.append(
            f'<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" y2="{bottom}" stroke="#333"/>'
            f'<line x1="{MARGIN_LEFT}" y1="{bottom}" x2="{WIDTH - MARGIN_RIGHT}" y2="{bottom}" stroke="#333"/>'
        )
        for step in range(5):
            value = self.low + (self.high - self.low) * step / 4
            y = self._y(value)
            self.parts.append(
                f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{value:,.4g}</text>'
                f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{WIDTH - MARGIN_RIGHT}" y2="{y:.1f}" stroke="#ddd"/>'
            )
        for x, label in ticks:
            self.parts.append(
                f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" font-size="11">{escape(label[:16])}</text>'
            )

    def bars(self, labels: Sequence[str], values: Sequence[float]) -> None:
        self._scale(values)
        slot = self.plot_w / max(len(values), 1)
        zero = self._y(0.0)
        ticks = []
        for index, value in enumerate(values):
            x = MARGIN_LEFT + slot * index + slot * 0.1
            top = min(self._y(value), zero)
            self.parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{slot * 0.8:.1f}" height="{abs(zero - self._y(value)):.1f}" '
                f'fill="{PALETTE[0]}"><title>{escape(labels[index])}: {value:g}</title></rect>'
            )
            ticks.append((x + slot * 0.4, labels[index]))
        self._axes(ticks if len(labels) <= 20 else ticks[:: math.ceil(len(labels) / 20)])

    def lines(self, x: Sequence[str], series: Mapping[str, Sequence[float]]) -> None:
        self._scale([value for values in series.values() for value in values])
        step = self.plot_w / max(len(x) - 1, 1)
        for index, (name, values) in enumerate(series.items()):
            color = PALETTE[index % len(PALETTE)]
            points = " ".join(f"{MARGIN_LEFT + step * i:.1f},{self._y(v):.1f}" for i, v in enumerate(values))
            self.parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
            if name:
                self.parts.append(
                    f'<text x="{WIDTH - MARGIN_RIGHT}" y="{MARGIN_TOP + 14 * (index + 1)}" text-anchor="end" '
                    f'font-size="12" fill="{color}">{escape(name)}</text>'
                )
        ticks = [(MARGIN_LEFT + step * i, label) for i, label in enumerate(x)]
        self._axes(ticks if len(x) <= 20 else ticks[:: math.ceil(len(x) / 20)])

    def points(self, x: Sequence[float], y: Sequence[float]) -> None:
        self._scale(y, from_zero=False)
        low, high = min(x, default=0.0), max(x, default=1.0)
        span = high - low or 1.0
        for xv, yv in zip(x, y, strict=True):
            px = MARGIN_LEFT + self.plot_w * (xv - low) / span
            self.parts.append(f'<circle cx="{px:.1f}" cy="{self._y(yv):.1f}" r="3" fill="{PALETTE[0]}"/>')
        self._axes([(MARGIN_LEFT + self.plot_w * i / 4, f"{low + span * i / 4:.4g}") for i in range(5)])

    def write(self, path: str) -> str:
        svg_path = os.path.splitext(path)[0] + ".svg"
        labels = (
            f'<text x="{WIDTH / 2}" y="28" text-anchor="middle" font-size="16">{escape(self.title)}</text>'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 18}" text-anchor="middle" font-size="12">{escape(self.xlabel)}</text>'
            f'<text x="18" y="{HEIGHT / 2}" text-anchor="middle" font-size="12" '
            f'transform="rotate(-90 18 {HEIGHT / 2})">{escape(self.ylabel)}</text>'
        )
        body = "".join(self.parts)
        _make_parent(svg_path)
        with open(svg_path, "w", encoding="utf-8") as handle:
            handle.write(
                f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
                f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>{labels}{body}</svg>\n'
            )
        return svg_path
