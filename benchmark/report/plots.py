"""Robustness and per-round plots (PNG + PDF), plus the area-under-curve robustness score.

Figures are drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas so nothing
depends on (or changes) the global pyplot backend; this runs headless. Records are grouped with
the same rules as the tables (:mod:`benchmark.report.records`), so a point on a plot is the same
average as the matching table cell; bands are +-1 sample std (ddof=1) over seeds.
"""

from __future__ import annotations

import colorsys
import logging
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

from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.records import (
    STD_DDOF,
    aggregate,
    apply_filters,
    check_keys,
    check_uniform,
    metric_column,
    records_frame,
    select_records,
    value_key,
)
from benchmark.report.tables import key_label, metric_label

log = logging.getLogger(__name__)

_MAX_MARKED_POINTS = 30


def curve_auc(x_values: Sequence[float], y_values: Sequence[float]) -> float:
    """Trapezoid area under y(x) divided by the x range, i.e. the mean height of the curve.

    Normalising by the range keeps the score in the metric's units, so methods evaluated on the
    same x grid compare directly. A single point gives its y; a NaN anywhere gives NaN (a failed
    point makes the score undefined rather than silently better).
    """
    x = np.asarray(x_values, dtype=float)
    y = np.asarray(y_values, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"curve_auc needs two 1-d sequences of equal length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("curve_auc needs at least one point")
    if np.isnan(x).any() or np.isnan(y).any():
        return math.nan
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    width = x[-1] - x[0]
    if width == 0:
        return float(y.mean())
    area = float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))
    return area / width


def _stem_paths(out_stem: str | Path) -> tuple[Path, Path]:
    stem = Path(out_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    return Path(f"{stem}.png"), Path(f"{stem}.pdf")


def _save(fig: Figure, out_stem: str | Path) -> list[Path]:
    png, pdf = _stem_paths(out_stem)
    FigureCanvasAgg(fig)
    fig.savefig(png, dpi=200, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None, "Creator": None})
    return [png, pdf]


def _hue_text(value: Any, hue_labels: Mapping[Any, str] | None) -> str:
    if hue_labels:
        labels = {value_key(k): str(v) for k, v in hue_labels.items()}
        if value_key(value) in labels:
            return labels[value_key(value)]
    return f"{value:g}" if isinstance(value, float) else str(value)


def _prepare(records: Sequence[Mapping[str, Any]], keys: Sequence[str], filters: Mapping[str, Any] | None,
             what: str) -> pd.DataFrame:
    """Frame of the records a plot may use: keys checked, filters applied, cells uniform."""
    if not records:
        raise DataError(f"{what}: no result records to plot")
    frame = records_frame(records)
    check_keys(frame, keys, what)
    frame = apply_filters(frame, filters, what)
    if frame.empty:
        raise ConfigError(f"{what}: filters {dict(filters or {})} match no records")
    check_uniform(frame, keys, what)
    return frame


def _metric_col(frame: pd.DataFrame, metric: str, what: str) -> str:
    col = metric_column(metric)
    if col not in frame.columns:
        known = frame.attrs.get("metric_keys", [])
        raise ConfigError(f"{what}: metric '{col}' is in no record{closest(col, known)}; "
                          f"metrics in the records: {', '.join(known) or '(none)'}")
    return col


def _log_exclusions(exclusions: Sequence[Any], what: str) -> None:
    for ex in exclusions:
        log.warning("%s: cell %s: %d record(s) excluded, %s", what, ex.cell, ex.n_excluded, ex.reason)


def _seed_means(records: Sequence[Mapping[str, Any]], keys: tuple[str, str], metric: str,
                filters: Mapping[str, Any] | None, what: str, axes: str = "x and hue") -> pd.DataFrame:
    """Mean and std over seeds of ``metric`` per cell of the two ``keys`` (series, x), the first
    step of every figure: keys and filters checked, uniform cells, excluded records logged.
    Cells whose seeds all failed are kept (``n`` 0) for the caller to name or drop. ``axes``
    names the two keys in the error for equal keys."""
    if keys[0] == keys[1]:
        raise ConfigError(f"{what}: {axes} are the same key '{keys[0]}'")
    frame = _prepare(records, list(keys), filters, what)
    col = _metric_col(frame, metric, what)
    selected, exclusions = select_records(frame, list(keys))
    _log_exclusions(exclusions, what)
    return aggregate(selected, list(keys), [col])


def _categories(agg: pd.DataFrame, x: str, hue: str, x_order: Sequence[Any] | None,
                hue_order: Sequence[Any] | None, what: str) -> tuple[list[Any], list[Any]]:
    """The ordered ``x`` values (at least two: a chart that compares them needs them) and the
    ordered ``hue`` values of a categorical chart."""
    columns = _hue_order(agg[x].tolist(), x_order)
    if len(columns) < 2:
        raise DataError(f"{what}: needs at least two values of '{x}', the records have {len(columns)}")
    return columns, _hue_order(agg[hue].tolist(), hue_order)


def _successful(agg: pd.DataFrame, metric: str, what: str) -> pd.DataFrame:
    """The cells with at least one successful seed; an error when there are none."""
    ok = agg[agg["n"] > 0]
    if ok.empty:
        raise DataError(f"{what}: no successful record has '{metric_column(metric)}'")
    return ok


def _hue_order(values: Sequence[Any], hue_order: Sequence[Any] | None) -> list[Any]:
    present = list(dict.fromkeys(values))
    if not hue_order:
        return sorted(present, key=lambda v: (isinstance(value_key(v), str), value_key(v)
                                              if not isinstance(value_key(v), str) else 0.0, str(v)))
    wanted = [value_key(v) for v in hue_order]
    rank = {nk: i for i, nk in enumerate(wanted)}
    return sorted(present, key=lambda v: (rank.get(value_key(v), len(rank)), str(v)))


def _y_label(metric: str, percent: bool) -> str:
    label = metric_label(metric)
    if not percent:
        return label
    return label[:-1] + ", %)" if label.endswith(")") else label + " (%)"


def _new_figure(n_series: int) -> tuple[Figure, Any, list[Any]]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(5.0, 3.6), layout="constrained")
        ax = fig.add_subplot()
    return fig, ax, series_palette(n_series)


def series_palette(n_series: int) -> list[Any]:
    """One distinct colour per series: the colour-blind palette's 10 colours, then the same hues
    dark (cycling would give two methods of one table the same colour; evenly spaced hues put
    neighbours too close), then evenly spaced hues past 20."""
    n = max(n_series, 1)
    if n <= 10:
        return sns.color_palette("colorblind", n)
    if n <= 20:
        return sns.color_palette("colorblind", 10) + sns.color_palette("dark", 10)[: n - 10]
    return sns.color_palette("husl", n)


def _legend_below(ax: Any, n: int) -> None:
    """Legend under the axes so it never hides a line; bbox_inches='tight' keeps it in frame."""
    if n:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(n, 4), frameon=False, fontsize=8)


_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p"]
_LINESTYLES = ["-", "--", "-.", ":"]
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
    records: Sequence[Mapping[str, Any]],
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
    records: Sequence[Mapping[str, Any]],
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


def round_curve_plot(
    records: Sequence[Mapping[str, Any]],
    metric: str = "val/accuracy",
    *,
    hue: str = "algorithm.name",
    out_stem: str | Path,
    title: str = "",
    hue_labels: Mapping[Any, str] | None = None,
    filters: Mapping[str, Any] | None = None,
    hue_order: Sequence[Any] | None = None,
    x: str = "round",
    percent: bool = True,
) -> list[Path]:
    """Per-round curves of ``metric`` (a key of each record's ``curves``), mean over seeds with a
    +-1 std band, one line per ``hue`` value; write PNG + PDF.

    Failed runs are left out (their curves stop early and would bias late rounds). Seeds with
    curves of different lengths (early stopping) are averaged over those that reached a round.
    """
    what = f"round curve plot of {metric}"
    frame = _prepare(records, [hue], filters, what)
    selected, exclusions = select_records(frame, [hue])
    _log_exclusions(exclusions, what)
    ok = selected[selected["status"] == "ok"]
    points: list[dict[str, Any]] = []
    curve_keys: dict[str, None] = {}
    for idx, h in zip(ok.index, ok[hue]):
        curves = records[idx].get("curves") or {}
        curve_keys.update(dict.fromkeys(curves))
        if metric not in curves or x not in curves:
            continue
        xs, ys = curves[x], curves[metric]
        if len(xs) != len(ys):
            raise DataError(f"{what}: record {idx} has curves '{x}' and '{metric}' of different lengths "
                            f"({len(xs)} vs {len(ys)})")
        for xv, yv in zip(xs, ys):
            if xv is None or yv is None:
                continue
            points.append({"hue": h, "hue_key": value_key(h), "x": float(xv), "y": float(yv)})
    if not points:
        known = sorted(curve_keys)
        raise ConfigError(f"{what}: no successful record has curves '{x}' and '{metric}'"
                          f"{closest(metric, known)}; curve keys in the records: {', '.join(known) or '(none)'}")
    data = pd.DataFrame(points).dropna(subset=["y"])
    scale = 100.0 if percent else 1.0
    stats = data.groupby(["hue_key", "x"])["y"].agg(["mean", "std", "count"]).reset_index()
    stats["std"] = np.where(stats["count"] > STD_DDOF, stats["std"], 0.0)
    first_raw = dict(zip(data["hue_key"], data["hue"]))

    hues = _hue_order(list(first_raw.values()), hue_order)
    fig, ax, palette = _new_figure(len(hues))
    for i, h in enumerate(hues):
        part = stats[stats["hue_key"] == value_key(h)].sort_values("x")
        xs = part["x"].to_numpy()
        mean = part["mean"].to_numpy() * scale
        std = np.nan_to_num(part["std"].to_numpy()) * scale
        color = palette[i % len(palette)]
        marker = _MARKERS[i % len(_MARKERS)] if len(xs) <= _MAX_MARKED_POINTS else None
        ax.plot(xs, mean, marker=marker, markersize=4, linewidth=1.5, color=color,
                label=_hue_text(h, hue_labels))
        ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.18, linewidth=0)
    ax.set_xlabel(key_label(x))
    ax.set_ylabel(_y_label(metric, percent))
    if title:
        ax.set_title(title)
    _legend_below(ax, len(hues))
    return _save(fig, out_stem)



def _sorted_values(values: Sequence[Any]) -> list[Any]:
    """Distinct values, numbers ascending, then text in first-seen order."""
    distinct = list(dict.fromkeys(values))
    nums = [v for v in distinct if not isinstance(value_key(v), str)]
    text = [v for v in distinct if isinstance(value_key(v), str)]
    return sorted(nums, key=lambda v: value_key(v)) + text


def heatmap_plot(
    records: Sequence[Mapping[str, Any]],
    x: str,
    y: str,
    metric: str,
    *,
    out_stem: str | Path,
    title: str = "",
    filters: Mapping[str, Any] | None = None,
    percent: bool = True,
    annotate: bool = True,
    x_label: str | None = None,
    y_label: str | None = None,
    cmap: str = "viridis",
) -> list[Path]:
    """Mean ``metric`` over seeds on the ``x`` by ``y`` grid (a sensitivity heatmap, e.g.
    lambda_rec x lambda_route); write ``<out_stem>.png`` and ``.pdf`` and return both paths.

    Grid values are the records' own (numbers ascending, equally spaced cells, so 0.01 and 1.0
    sit one cell apart as in the papers' figures). A grid point without a successful seed is
    hatched grey and labelled "failed" or "—", never coloured as a number. Cells are annotated
    with the mean (and the sample std over seeds below it when there are several).
    """
    what = f"heatmap of {metric} over {x} x {y}"
    agg = _seed_means(records, (x, y), metric, filters, what, axes="x and y")
    _successful(agg, metric, what)
    xs = _sorted_values(agg[x].tolist())
    ys = _sorted_values(agg[y].tolist())
    xi = {value_key(v): i for i, v in enumerate(xs)}
    yi = {value_key(v): i for i, v in enumerate(ys)}
    scale = 100.0 if percent else 1.0
    mean = np.full((len(ys), len(xs)), np.nan)
    std = np.full((len(ys), len(xs)), np.nan)
    failed = np.zeros((len(ys), len(xs)), dtype=np.bool_)
    for rec in agg.to_dict("records"):
        i, j = yi[value_key(rec[y])], xi[value_key(rec[x])]
        if rec["n"] > 0:
            mean[i, j] = rec["mean"] * scale
            std[i, j] = rec["std"] * scale
        elif rec["n_failed"] > 0:
            failed[i, j] = True

    with sns.axes_style("white"):
        fig = Figure(figsize=(1.0 + 0.9 * max(len(xs), 3), 0.9 + 0.7 * max(len(ys), 3)), layout="constrained")
        ax = fig.add_subplot()
    masked = np.ma.masked_invalid(mean)
    image = ax.imshow(masked, cmap=cmap, aspect="auto", origin="lower")
    ax.set_facecolor("#d9d9d9")
    lo, hi = float(np.nanmin(mean)), float(np.nanmax(mean))
    if annotate:
        mid = (lo + hi) / 2.0
        for i in range(len(ys)):
            for j in range(len(xs)):
                if np.isnan(mean[i, j]):
                    ax.text(j, i, "failed" if failed[i, j] else "—", ha="center", va="center", fontsize=7,
                            color="black")
                    continue
                text = f"{mean[i, j]:.1f}" if percent else f"{mean[i, j]:.3g}"
                if not np.isnan(std[i, j]):
                    text += f"\n±{std[i, j]:.1f}" if percent else f"\n±{std[i, j]:.2g}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="white" if mean[i, j] < mid or hi == lo else "black")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([_hue_text(v, None) for v in xs])
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels([_hue_text(v, None) for v in ys])
    ax.set_xlabel(x_label or key_label(x))
    ax.set_ylabel(y_label or key_label(y))
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(_y_label(metric, percent))
    if title:
        ax.set_title(title)
    return _save(fig, out_stem)


PLOT_KINDS = {"robustness": robustness_plot, "heatmap": heatmap_plot, "round_curve": round_curve_plot}
