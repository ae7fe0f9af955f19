"""Robustness curves (a metric against a missing rate or alpha, one line per method, +-1 std bands
over seeds), drawn as one panel with direct labels or as small multiples, and the robustness
AUC per method. Part of the report's figures (:mod:`benchmark.report.plots`)."""

from __future__ import annotations

import colorsys
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from benchmark.record import Record
from benchmark.errors import ConfigError
from benchmark.report.curve_metrics import curve_auc
from benchmark.report.plot_common import (
    _LINESTYLES,
    _MARKERS,
    _hue_order,
    _hue_text,
    _log_exclusions,
    _metric_col,
    _new_figure,
    _prepare,
    _save,
    _seed_means,
    _successful,
    _y_label,
    series_palette,
)
from benchmark.report.records import aggregate, select_records, value_key
from benchmark.report.tables import key_label

ROBUSTNESS_LAYOUTS = ("auto", "lines", "facets")


MAX_LABELLED_SERIES = 8  # "auto" draws more series than this as small multiples


_BAND_ALPHA = 0.10  # one panel: light bands, so overlapping ones stay readable


_LABEL_SIZE = 7.5


_LABEL_GAP = 1.3  # direct labels' centre-to-centre spacing, in font heights


_CONTEXT_GREY = "#9e9e9e"


_FACET_STYLE = {"grid.color": "#ededed", "axes.edgecolor": "#bdbdbd"}


@dataclass
class Series:
    """One drawn curve of a robustness plot: its label, points, band and style."""

    label: str
    xs: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    color: Any
    marker: str
    linestyle: str


def spread_positions(wanted: Sequence[float], gap: float, lo: float | None = None,
                     hi: float | None = None) -> list[float]:
    """Positions as near ``wanted`` as possible (least squares) and at least ``gap`` apart, in the
    input's order; kept within [lo, hi] where they fit (``lo`` wins when they do not).

    Neighbours closer than ``gap`` merge into a cluster centred on their wanted mean, and merging
    repeats until no two clusters overlap: how direct labels of bunched lines avoid each other.
    """
    clusters: list[list[Any]] = []  # [members (input indices), sum of wanted - j * gap, start]
    for i in sorted(range(len(wanted)), key=lambda k: wanted[k]):
        clusters.append([[i], float(wanted[i]), 0.0])
        _place_cluster(clusters[-1], gap, lo, hi)
        while len(clusters) > 1 and clusters[-2][2] + len(clusters[-2][0]) * gap > clusters[-1][2] + 1e-12:
            top = clusters.pop()
            low = clusters[-1]
            low[1] += top[1] - len(low[0]) * len(top[0]) * gap
            low[0] += top[0]
            _place_cluster(low, gap, lo, hi)
    out = [0.0] * len(wanted)
    for members, _, start in clusters:
        for j, i in enumerate(members):
            out[i] = start + j * gap
    return out


def _place_cluster(cluster: list[Any], gap: float, lo: float | None, hi: float | None) -> None:
    """Start a cluster at its members' least-squares position, clamped to [lo, hi]."""
    n = len(cluster[0])
    start = cluster[1] / n
    if hi is not None:
        start = min(start, hi - (n - 1) * gap)
    if lo is not None:
        start = max(start, lo)
    cluster[2] = start


def _ink(color: Any) -> tuple[float, float, float]:
    """A text colour for a series: its hue, darkened where it is too light to read on white."""
    h, light, sat = colorsys.rgb_to_hls(*to_rgb(color))
    return colorsys.hls_to_rgb(h, min(light, 0.40), sat)


def _robustness_series(agg: pd.DataFrame, hue: str, x: str, hues: Sequence[Any],
                       hue_labels: Mapping[Any, str] | None, scale: float) -> list[Series]:
    """The curves of a robustness plot, one per ``hue`` value (cells with no successful seed
    left out and named in the label), each with its own colour, marker and line style."""
    palette = series_palette(len(hues))
    out = []
    for i, h in enumerate(hues):
        part = agg[agg[hue].map(value_key) == value_key(h)].copy()
        part["x"] = pd.to_numeric(part[x])
        part = part.sort_values("x")
        ok = part[part["n"] > 0]
        failed = part[(part["n_ok"] == 0) & (part["n_failed"] > 0)]
        label = _hue_text(h, hue_labels)
        if not failed.empty:
            label += f" (failed at {x.split('.')[-1]}=" + ", ".join(f"{v:g}" for v in failed["x"]) + ")"
        out.append(Series(label, ok["x"].to_numpy(), ok["mean"].to_numpy() * scale,
                          np.nan_to_num(ok["std"].to_numpy() * scale), palette[i % len(palette)],
                          _MARKERS[i % len(_MARKERS)], _LINESTYLES[i % len(_LINESTYLES)]))
    return out


def _draw_series(ax: Any, s: Series, *, band_alpha: float = _BAND_ALPHA, linewidth: float = 1.6) -> None:
    """One curve: line with its marker and style, and its +-1 std band."""
    ax.plot(s.xs, s.mean, marker=s.marker, markersize=5, linewidth=linewidth, linestyle=s.linestyle,
            color=s.color, label=s.label, zorder=3)
    ax.fill_between(s.xs, s.mean - s.std, s.mean + s.std, color=s.color, alpha=band_alpha, linewidth=0, zorder=2)


def _x_axis(ax: Any, ticks: Sequence[float], log_x: bool) -> None:
    """The records' x values as ticks (log scale for alpha-like keys)."""
    if log_x:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_locator(FixedLocator(list(ticks)))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t:g}" for t in ticks]))


def direct_labels(fig: Figure, ax: Any, series: Sequence[Series]) -> list[Any]:
    """Label each curve at its right end, in the margin right of the axes, the labels pushed
    apart (:func:`spread_positions`) so they never overlap, each tied to its line end by a thin
    leader. Returns the label artists."""
    ends = [s for s in series if len(s.xs)]
    labels = [ax.annotate(s.label, xy=(s.xs[-1], s.mean[-1]), xytext=(1.03, s.mean[-1]),
                          textcoords=("axes fraction", "data"), va="center", ha="left", fontsize=_LABEL_SIZE,
                          color=_ink(s.color), annotation_clip=False,
                          arrowprops={"arrowstyle": "-", "color": s.color, "linewidth": 0.6, "alpha": 0.8,
                                      "shrinkA": 1, "shrinkB": 4})
              for s in ends]
    for _ in range(2):  # the labels widen the layout; place them again once it has settled
        fig.draw_without_rendering()
        _spread_labels(ax, labels, [s.mean[-1] for s in ends])
    return labels


def _spread_labels(ax: Any, labels: Sequence[Any], ends: Sequence[float]) -> None:
    """Move the labels (in display units, then back to data) to non-overlapping heights."""
    to_px = ax.transData.transform
    wanted = [to_px((0.0, y))[1] for y in ends]
    y0, y1 = ax.get_window_extent().y0, ax.get_window_extent().y1
    gap = _LABEL_SIZE * _LABEL_GAP * ax.figure.dpi / 72.0
    placed = spread_positions(wanted, gap, y0 + gap / 2, y1 - gap / 2)
    back = ax.transData.inverted().transform
    for label, y in zip(labels, placed):
        label.xyann = (1.03, float(back((0.0, y))[1]))


def _lines_figure(series: Sequence[Series], ticks: Sequence[float], log_x: bool, x_label: str,
                  y_label: str, title: str) -> Figure:
    """All curves on one panel, labelled directly at their ends (no legend to look up)."""
    fig, ax, _ = _new_figure(len(series))
    FigureCanvasAgg(fig)
    for s in series:
        _draw_series(ax, s)
    _x_axis(ax, ticks, log_x)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(title, fontsize=10)
    direct_labels(fig, ax, series)
    undrawn = [s.label for s in series if not len(s.xs)]
    if undrawn:
        ax.annotate("Not drawn, no successful seed: " + "; ".join(undrawn), xy=(0.0, 0.0), xycoords="axes fraction",
                    xytext=(0, -38), textcoords="offset points", va="top", fontsize=7, color="0.3")
    return fig


def _facet_grid(n: int) -> tuple[int, int]:
    """(rows, columns) of the small multiples of ``n`` series: at most four columns."""
    cols = 4 if n > 9 else 3 if n > 4 else n
    return math.ceil(n / cols), cols


def _facets_figure(series: Sequence[Series], ticks: Sequence[float], log_x: bool, x_label: str,
                   y_label: str, title: str) -> Figure:
    """Small multiples: one panel per series, drawn in colour with its band over the other
    series in grey, all panels on the same axes so heights compare across panels."""
    rows, cols = _facet_grid(len(series))
    with sns.axes_style("whitegrid", _FACET_STYLE):
        fig = Figure(figsize=(1.95 * cols + 0.7, 1.6 * rows + 0.9), layout="constrained")
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for i, (ax, focus) in enumerate(zip(axes, series)):
        for other in series:
            if other is not focus:
                ax.plot(other.xs, other.mean, color=_CONTEXT_GREY, linewidth=0.7, alpha=0.7, zorder=1)
        _draw_series(ax, focus, band_alpha=0.22, linewidth=1.8)
        name, _, failed = focus.label.partition(" (failed at ")
        ax.set_title(name + (f"\n(failed at {failed}" if failed else ""), fontsize=8.5, color=_ink(focus.color),
                     fontweight="bold", pad=3)
        ax.tick_params(labelsize=7, labelbottom=i + cols >= len(series))
        ax.margins(x=0.06)
    for ax in axes[len(series):]:
        ax.set_visible(False)
    _x_axis(axes[0], ticks, log_x)
    fig.supxlabel(x_label, fontsize=9)
    fig.supylabel(y_label, fontsize=9)
    if title:
        fig.suptitle(title + "\n(each panel: one method in colour, the others in grey)", fontsize=10)
    return fig


def robustness_plot(
    records: Sequence[Record | Mapping[str, Any]],
    x: str,
    metric: str,
    *,
    hue: str = "algorithm.name",
    out_stem: str | Path,
    title: str = "",
    hue_labels: Mapping[Any, str] | None = None,
    filters: Mapping[str, Any] | None = None,
    hue_order: Sequence[Any] | None = None,
    log_x: bool | None = None,
    percent: bool = True,
    layout: str = "auto",
) -> list[Path]:
    """Plot mean metric vs ``x`` (e.g. missing.rate, partition.alpha), one curve per ``hue`` value,
    +-1 std band over seeds; write ``<out_stem>.png`` and ``.pdf`` and return both paths.

    ``layout`` "lines" draws every curve on one panel, each with its own colour, marker and line
    style and labelled at its end (labels pushed apart, never overlapping); "facets" draws small
    multiples, one panel per curve with the others in grey; "auto" (default) picks facets past
    :data:`MAX_LABELLED_SERIES` curves, where one panel would bunch. ``log_x=None`` picks a log
    axis for alpha-like keys (Dirichlet alpha spans decades). Cells whose seeds all failed are
    left out of the curve and named in its label.
    """
    what = f"robustness plot of {metric} vs {x}"
    if layout not in ROBUSTNESS_LAYOUTS:
        raise ConfigError(f"{what}: layout '{layout}' is none of {', '.join(ROBUSTNESS_LAYOUTS)}")
    agg = _seed_means(records, (hue, x), metric, filters, what)
    xs_all = pd.to_numeric(agg[x], errors="coerce")
    if xs_all.isna().any():
        bad = sorted({str(v) for v, n in zip(agg[x], xs_all) if n != n})
        raise ConfigError(f"{what}: x param '{x}' must be numeric, got {', '.join(bad)}")
    if log_x is None:
        log_x = "alpha" in x.lower() and bool((xs_all > 0).all())
    elif log_x and not (xs_all > 0).all():
        raise ConfigError(f"{what}: log x axis needs positive '{x}' values")
    _successful(agg, metric, what)
    hues = _hue_order(agg[hue].tolist(), hue_order)
    series = _robustness_series(agg, hue, x, hues, hue_labels, 100.0 if percent else 1.0)
    facets = layout == "facets" or (layout == "auto" and len(series) > MAX_LABELLED_SERIES)
    draw = _facets_figure if facets else _lines_figure
    fig = draw(series, sorted(set(xs_all.tolist())), log_x, key_label(x) + (" (log scale)" if log_x else ""),
               _y_label(metric, percent), title)
    return _save(fig, out_stem)


def robustness_auc(
    records: Sequence[Record | Mapping[str, Any]],
    x: str,
    metric: str,
    *,
    hue: str = "algorithm.name",
    filters: Mapping[str, Any] | None = None,
    log_x: bool | None = None,
    percent: bool = True,
) -> dict[Any, float]:
    """Robustness AUC per hue value: :func:`curve_auc` of the seed-mean curve of ``metric`` vs ``x``.

    A hue value lacking a successful point at any x that others have gets NaN, since an area
    over a shorter range is not comparable. ``log_x`` (default: alpha-like keys) integrates over
    log10(x) so each decade of alpha weighs the same.
    """
    what = f"robustness AUC of {metric} vs {x}"
    frame = _prepare(records, [x, hue], filters, what)
    col = _metric_col(frame, metric, what)
    selected, exclusions = select_records(frame, [hue, x])
    _log_exclusions(exclusions, what)
    agg = aggregate(selected, [hue, x], [col])
    agg["x"] = pd.to_numeric(agg[x], errors="coerce")
    if agg["x"].isna().any():
        raise ConfigError(f"{what}: x param '{x}' must be numeric")
    if log_x is None:
        log_x = "alpha" in x.lower() and bool((agg["x"] > 0).all())
    grid = sorted(set(agg["x"]))
    scale = 100.0 if percent else 1.0
    out: dict[Any, float] = {}
    for h in _hue_order(agg[hue].tolist(), None):
        part = agg[(agg[hue].map(value_key) == value_key(h)) & (agg["n"] > 0)].sort_values("x")
        if sorted(part["x"]) != grid:
            out[h] = math.nan
            continue
        xs = np.log10(part["x"].to_numpy()) if log_x else part["x"].to_numpy()
        out[h] = float(curve_auc(xs, part["mean"].to_numpy() * scale))
    return out
