"""Score against cost: one point per method, its cost on x and its score on y.

The efficiency-vs-score figure (FedMGS, docs/protocols.md Track 2): a method is worth its cost
when it sits up and to the left. Each point is the mean over seeds of both quantities, with
the seed std as whiskers on both axes and the method's name beside it: names are placed once
the layout is drawn so that no two print over each other (nor over a reference line's name),
one moved away from a crowded point in the point's colour with a thin line to it, the same
records always giving the same places (:func:`place_labels`). Either axis takes a
``test/*`` metric or a record field that tables know (``seconds_per_round``,
``bytes_per_round``, ``peak_memory_mb``...), in its own units; ``log_x`` for costs that span
orders of magnitude. Reference rows (chance, the linear model, the centralized GNN) are not
methods whose cost is comparable (chance costs nothing, the linear model is fitted once):
each is a dotted horizontal line at its mean score, named at the right edge (the left one when
points cover the name at the right).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmark.record import Record, as_records
from benchmark.errors import ConfigError, DataError
from benchmark.report.plot_common import (
    _hue_order,
    _hue_text,
    _log_exclusions,
    _metric_col,
    _prepare,
    _save,
    series_palette,
)
from benchmark.report.records import aggregate, select_records, value_key
from benchmark.report.flags import REFERENCE_ALGORITHMS
from benchmark.report.reference_rows import reference_name
from benchmark.report.tables import metric_label, with_record_metrics


def point_means(records: Sequence[Record | Mapping[str, Any]], x: str, y: str, *, hue: str = "algorithm.name",
                filters: Mapping[str, Any] | None = None, hue_order: Sequence[Any] | None = None,
                what: str = "score vs cost") -> pd.DataFrame:
    """Per ``hue`` value (rows, in ``hue_order``): mean and seed std of ``x`` and ``y`` over
    the successful records that have both, and their count ``n``."""
    if x == y:
        raise ConfigError(f"{what}: x and y are the same metric '{x}'")
    frame = _prepare(with_record_metrics(records, [x, y]), [hue], filters, what)
    cols = [_metric_col(frame, m, what) for m in (x, y)]
    selected, exclusions = select_records(frame, [hue])
    _log_exclusions(exclusions, what)
    ok = selected[(selected["status"] == "ok") & selected[cols].notna().all(axis=1)]
    if ok.empty:
        raise DataError(f"{what}: no successful record has both {x} and {y}")
    agg = aggregate(ok, [hue], cols)
    rows = []
    for h in _hue_order(list(dict.fromkeys(agg[hue])), hue_order):
        cell = agg[agg[hue].map(value_key) == value_key(h)].set_index("metric")
        rows.append({hue: h, "x": float(cell.loc[cols[0], "mean"]), "x_std": float(np.nan_to_num(cell.loc[cols[0], "std"])),
                     "y": float(cell.loc[cols[1], "mean"]), "y_std": float(np.nan_to_num(cell.loc[cols[1], "std"])),
                     "n": int(cell.loc[cols[1], "n"])})
    return pd.DataFrame(rows)


_LABEL_GAP_PT = 1.5
"""Points of clear space kept between two labels' boxes (and between a label and a marker)."""


def _overlaps(box: tuple[float, float, float, float], other: tuple[float, float, float, float],
              gap: float = 0.0) -> bool:
    """Whether two (x0, y0, x1, y1) boxes, each grown by ``gap`` / 2, overlap."""
    return (box[0] < other[2] + gap and other[0] < box[2] + gap
            and box[1] < other[3] + gap and other[1] < box[3] + gap)


def _label_offsets(w: float, h: float, d: float = 5.0, rings: int = 40) -> list[tuple[float, float]]:
    """Candidate offsets (points) of a ``w`` x ``h`` label's lower-left corner from its point,
    nearest first: ``d`` to the right of the point and to its left (up, level, down), above and
    below it, then beside it moved out a label height (and a few points sideways) at a time."""
    step_y, step_x = h + _LABEL_GAP_PT, 6.0
    near = [(d, 2.0), (d, -h / 2), (d, -2.0 - h), (-d - w, 2.0), (-d - w, -h / 2), (-d - w, -2.0 - h),
            (-w / 2, d), (-w / 2, -d - h)]
    far = []
    for k in range(1, rings + 1):
        for sx in range(0, 4):
            for dx in (d + sx * step_x, -d - w - sx * step_x):
                far += [(dx, 2.0 + k * step_y), (dx, -2.0 - h - k * step_y)]

    def gap(off: tuple[float, float]) -> float:  # distance from the point to the box
        gx = max(off[0], 0.0, -(off[0] + w))
        gy = max(off[1], 0.0, -(off[1] + h))
        return float(np.hypot(gx, gy))
    return near + sorted(far, key=gap)


def place_labels(points: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 radii: Sequence[float] | None = None,
                 fixed: Sequence[tuple[float, float, float, float]] = (),
                 whiskers: Sequence[tuple[float, float, float, float]] = (),
                 frame: tuple[float, float, float, float] | None = None,
                 order: Sequence[int] | None = None) -> list[tuple[float, float]]:
    """Offsets (points) of each label's lower-left corner from its point so that no two labels
    overlap, nor a label and a ``fixed`` box (another text already drawn). All coordinates are
    points in one frame (display units scaled to points); boxes are (x0, y0, x1, y1); a point's
    marker is the square of half-side ``radii`` (default 3.5) around it.

    Labels are placed one at a time in ``order`` (default: as given), each at the candidate
    (:func:`_label_offsets`, nearest first) that clears every box placed before it and costs
    least: leaving ``frame`` (the axes) costs most, covering a marker next, crossing a whisker
    a little, and each candidate further out a little more. Deterministic: the same points and
    sizes give the same offsets."""
    radii = [3.5] * len(points) if radii is None else list(radii)
    markers = [(px - r, py - r, px + r, py + r) for (px, py), r in zip(points, radii)]
    placed: list[tuple[float, float, float, float]] = list(fixed)
    offsets: list[tuple[float, float]] = [(radii[i] + _LABEL_GAP_PT, 2.0) for i in range(len(points))]
    for i in (range(len(points)) if order is None else order):
        (px, py), (w, h) = points[i], sizes[i]
        best: tuple[float, int, tuple[float, float]] | None = None
        for rank, (dx, dy) in enumerate(_label_offsets(w, h, radii[i] + _LABEL_GAP_PT)):
            box = (px + dx, py + dy, px + dx + w, py + dy + h)
            if any(_overlaps(box, other, _LABEL_GAP_PT) for other in placed):
                continue
            outside = frame is not None and not (frame[0] <= box[0] and box[2] <= frame[2]
                                                 and frame[1] <= box[1] and box[3] <= frame[3])
            cost = (1000.0 * outside + 40.0 * sum(_overlaps(box, m) for m in markers)
                    + 8.0 * sum(_overlaps(box, s) for s in whiskers) + 0.5 * rank)
            if best is None or cost < best[0]:
                best = (cost, rank, (dx, dy))
            if best[0] <= 0.5 * rank:  # every candidate further out costs more
                break
        if best is None:  # cannot happen with enough rings; keep the default rather than fail
            continue
        offsets[i] = best[2]
        dx, dy = best[2]
        placed.append((px + dx, py + dy, px + dx + w, py + dy + h))
    return offsets


def score_vs_cost(
    records: Sequence[Record | Mapping[str, Any]],
    x: str,
    y: str,
    *,
    hue: str = "algorithm.name",
    out_stem: str | Path,
    hue_order: Sequence[Any] | None = None,
    hue_labels: Mapping[Any, str] | None = None,
    highlight: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    x_label: str = "",
    y_label: str = "",
    log_x: bool = False,
    title: str = "",
) -> list[Path]:
    """A labelled point per ``hue`` value at (mean ``x``, mean ``y``) with seed-std whiskers;
    the ``highlight`` values drawn larger; write ``<out_stem>.png`` and ``.pdf``."""
    what = f"score vs cost ({y} against {x})"
    recs = as_records(records)
    methods = [r for r in recs if reference_name(r) is None]
    references = [r for r in recs if reference_name(r) is not None]
    table = point_means(methods, x, y, hue=hue, filters=filters, hue_order=hue_order, what=what)
    lines = point_means(references, x, y, hue=hue, filters=filters, what=what) if references else None
    if log_x and (table["x"] <= 0).any():
        raise DataError(f"score vs cost: log_x needs positive {x}, and some mean is <= 0")
    marked = {value_key(v) for v in highlight or []}
    fig = Figure(figsize=(6.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    palette = series_palette(len(table))
    labels = []
    for j, row in table.iterrows():
        big = value_key(row[hue]) in marked
        ax.errorbar(row["x"], row["y"], xerr=row["x_std"], yerr=row["y_std"], fmt="*" if big else "o",
                    markersize=11 if big else 6, color=palette[j], ecolor=palette[j], elinewidth=0.7, capsize=2)
        label = ax.annotate(_hue_text(row[hue], hue_labels), (row["x"], row["y"]), textcoords="offset points",
                            xytext=(5, 2), ha="left", va="bottom", fontsize=7,
                            fontweight="bold" if big else "normal", color="black")
        label.set_in_layout(False)  # placed after the layout, which it must not move
        labels.append(label)
    fixed = []
    for _, row in (lines.iterrows() if lines is not None else ()):
        ax.axhline(row["y"], color="0.45", linestyle=":", linewidth=0.9)
        name = REFERENCE_ALGORITHMS.get(str(row[hue]), _hue_text(row[hue], hue_labels))
        fixed.append(ax.annotate(name, (1.0, row["y"]), xycoords=("axes fraction", "data"),
                                 xytext=(-3, 2), textcoords="offset points", ha="right", fontsize=6.5, color="0.3"))
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(x_label or metric_label(x))
    ax.set_ylabel(y_label or metric_label(y))
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    if title:
        ax.set_title(title, fontsize=10)
    _place_point_labels(fig, ax, table, labels, fixed, palette, [value_key(h) in marked for h in table[hue]])
    return _save(fig, out_stem)


def _place_point_labels(fig: Figure, ax: Any, table: pd.DataFrame, labels: Sequence[Any], fixed: Sequence[Any],
                        palette: Sequence[Any], big: Sequence[bool]) -> None:
    """Move each point's label (:func:`place_labels`) once the layout is done and the axes'
    limits are fixed; a label moved away from its point takes the point's colour and a thin
    leader line to it. A reference line's name (``fixed``) that points cover at the right edge
    moves to the left edge first, when fewer cover it there."""
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    ax.set_xlim(ax.get_xlim())  # leader lines must not rescale the axes they were placed on
    ax.set_ylim(ax.get_ylim())
    pt = 72.0 / fig.dpi  # display units to points

    def box(extent: Any) -> tuple[float, float, float, float]:
        return (extent.x0 * pt, extent.y0 * pt, extent.x1 * pt, extent.y1 * pt)

    def at(xv: float, yv: float) -> tuple[float, float]:
        dx, dy = ax.transData.transform((xv, yv))
        return float(dx * pt), float(dy * pt)

    points, sizes, radii, whiskers = [], [], [], []
    for j, row in table.iterrows():
        px, py = at(row["x"], row["y"])
        points.append((px, py))
        ext = labels[j].get_window_extent(renderer)
        sizes.append((ext.width * pt, ext.height * pt))
        radii.append((5.5 if big[j] else 3.0) + 0.5)  # half the marker, in points
        lo, hi = at(row["x"], row["y"] - row["y_std"])[1], at(row["x"], row["y"] + row["y_std"])[1]
        low_x = row["x"] - row["x_std"]
        left = at(low_x, row["y"])[0] if low_x > 0 or ax.get_xscale() != "log" else ax.bbox.x0 * pt
        whiskers += [(px - 1.0, lo, px + 1.0, hi), (left, py - 1.0, at(row["x"] + row["x_std"], row["y"])[0], py + 1.0)]
    markers = [(px - r, py - r, px + r, py + r) for (px, py), r in zip(points, radii)]
    for name in fixed:  # a reference's name goes to the left edge when points cover it at the right
        hidden = sum(_overlaps(box(name.get_window_extent(renderer)), m) for m in markers)
        if hidden:
            name.xy, name.xyann = (0.0, name.xy[1]), (3, 2)
            name.set_horizontalalignment("left")
            if sum(_overlaps(box(name.get_window_extent(renderer)), m) for m in markers) >= hidden:
                name.xy, name.xyann = (1.0, name.xy[1]), (-3, 2)
                name.set_horizontalalignment("right")
    offsets = place_labels(points, sizes, radii, fixed=[box(t.get_window_extent(renderer)) for t in fixed],
                           whiskers=whiskers, frame=box(ax.bbox),
                           order=sorted(range(len(points)), key=lambda j: not big[j]))  # the marked ones first
    to_data = ax.transData.inverted()
    for j, ((px, py), (w, h), r, (dx, dy)) in enumerate(zip(points, sizes, radii, offsets)):
        labels[j].xyann = (dx, dy)
        # the nearest point of the label's box to its point; a line when it is more than a few points off
        nx, ny = min(max(px, px + dx), px + dx + w), min(max(py, py + dy), py + dy + h)
        if np.hypot(nx - px, ny - py) > r + _LABEL_GAP_PT + 3.0:
            labels[j].set_color(palette[j])
            lx, ly = to_data.transform((nx / pt, ny / pt))
            ax.plot([table.iloc[j]["x"], lx], [table.iloc[j]["y"], ly], color=palette[j], linewidth=0.5,
                    alpha=0.8, zorder=1.5, scalex=False, scaley=False)


SCATTER_PLOT_KINDS = {"score_vs_cost": score_vs_cost}
