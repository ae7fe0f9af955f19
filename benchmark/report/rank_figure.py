"""Rank chart (bump chart): does a change of setting reorder the methods?

Each column is one value of a categorical param (say "NC, Dirichlet" and "NC, Louvain"); a
method's point in a column is its rank there by mean metric over seeds (1 = best), and a
line joins its ranks. Crossing lines are ranking changes, which a table shows only to a
reader who compares every pair of rows. Mean and std are written beside the end points.

Reference rows (chance, linear, centralized GNN) are not competitors and are not ranked: their
means per column are written under the chart, as a heatmap notes them under its axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from benchmark.record import Record, as_records
from benchmark.report.plot_common import (
    _MARKERS,
    _categories,
    _hue_text,
    _save,
    _seed_means,
    _successful,
    series_palette,
)
from benchmark.report.records import metric_column, value_key
from benchmark.report.reference_rows import reference_means, reference_name, reference_note
from benchmark.report.tables import metric_label


def rank_chart(
    records: Sequence[Record | Mapping[str, Any]],
    x: str,
    metric: str,
    *,
    hue: str = "algorithm.name",
    out_stem: str | Path,
    x_order: Sequence[Any] | None = None,
    x_labels: Mapping[Any, str] | None = None,
    hue_labels: Mapping[Any, str] | None = None,
    hue_order: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    title: str = "",
    lower_is_better: bool = False,
    percent: bool = True,
) -> list[Path]:
    """Rank of every ``hue`` value in each ``x`` column by mean ``metric``, joined by lines."""
    what = f"rank chart of {metric} over {x}"
    every = as_records(records)
    methods = [r for r in every if reference_name(r) is None]
    agg = _successful(_seed_means(methods, (hue, x), metric, filters, what), metric, what)
    columns, hues = _categories(agg, x, hue, x_order, hue_order, what)
    notes = [(c, reference_note(reference_means(every, metric_column(metric), {**(filters or {}), x: [c]}), percent))
             for c in columns]
    ranks: dict[Any, dict[int, tuple[int, float, float]]] = {value_key(h): {} for h in hues}
    for ci, c in enumerate(columns):
        part = agg[agg[x].map(value_key) == value_key(c)]
        part = part.sort_values("mean", ascending=lower_is_better, kind="stable")
        for r, (_, row) in enumerate(part.iterrows(), start=1):
            ranks[value_key(row[hue])][ci] = (r, float(row["mean"]), float(row["std"]))

    fig = Figure(figsize=(1.6 * len(columns) + 3.6, 0.36 * len(hues) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    palette = series_palette(len(hues))
    for i, h in enumerate(hues):
        pts = sorted(ranks[value_key(h)].items())
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1][0] for p in pts]
        color = palette[i]
        ax.plot(xs, ys, marker=_MARKERS[i % len(_MARKERS)], color=color, linewidth=2.0, markersize=7)
        name = _hue_text(h, hue_labels)
        for ci, (rank, mean, std) in pts:
            side_left = ci == 0
            text = f"{name}  {_value(mean, std, percent)}" if side_left or ci == len(columns) - 1 else ""
            if text:
                ax.annotate(text if side_left else f"{_value(mean, std, percent)}  {name}", (ci, rank),
                            xytext=(-10 if side_left else 10, 0), textcoords="offset points", va="center",
                            ha="right" if side_left else "left", fontsize=8, color=color)
    ax.set_xlim(-0.15, len(columns) - 0.85)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([_hue_text(c, x_labels) for c in columns])
    ax.xaxis.tick_top()
    ax.set_ylim(len(hues) + 0.5, 0.5)
    ax.set_yticks([])
    for side in ("left", "right", "bottom"):
        ax.spines[side].set_visible(False)
    note = f"rank by {metric_label(metric)}, 1 = best; mean ± std over seeds"
    ax.set_title(f"{title}\n{note}" if title else note, pad=24, fontsize=10)
    lines = [f"{_hue_text(c, x_labels)}: {n}" for c, n in notes if n]
    if lines:
        ax.xaxis.set_label_position("bottom")
        ax.set_xlabel("references on the same data (not ranked)\n" + "\n".join(lines), fontsize=8)
    return _save(fig, out_stem)


def _value(mean: float, std: float, percent: bool) -> str:
    scale = 100.0 if percent else 1.0
    return f"{mean * scale:.1f}±{std * scale:.1f}" if std == std else f"{mean * scale:.1f}"


RANK_PLOT_KINDS = {"ranks": rank_chart}
