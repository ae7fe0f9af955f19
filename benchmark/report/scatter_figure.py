"""Score against cost: one point per method, its cost on x and its score on y.

The efficiency-vs-score figure (FedMGS, docs/protocols.md Track 2): a method is worth its cost
when it sits up and to the left. Each point is the mean over seeds of both quantities, with
the seed std as whiskers on both axes and the method's name beside it. Either axis takes a
``test/*`` metric or a record field that tables know (``seconds_per_round``,
``bytes_per_round``, ``peak_memory_mb``...), in its own units; ``log_x`` for costs that span
orders of magnitude. Reference rows (chance, the linear model, the centralized GNN) are not
methods whose cost is comparable (chance costs nothing, the linear model is fitted once):
each is a dotted horizontal line at its mean score, named at the right edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
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


def label_lifts(x: Sequence[float], y: Sequence[float], near_x: float = 0.15, height: float = 0.05) -> list[int]:
    """How many label heights to lift each point's label so that labels of points close
    together do not print over each other. Coordinates are taken as fractions of the axes'
    spans; a label is ``height`` tall and clashes with one less than ``near_x`` away. Bottom
    to top, each label goes up until it clashes with none placed before it."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xs = (xs - xs.min()) / max(float(np.ptp(xs)), 1e-12)
    ys = (ys - ys.min()) / max(float(np.ptp(ys)), 1e-12)
    lifts, placed = [0] * len(xs), []
    for i in np.argsort(ys, kind="stable"):
        while any(abs(xs[j] - xs[i]) < near_x and abs(ys[j] + lifts[j] * height - ys[i] - lifts[i] * height) < height
                  for j in placed):
            lifts[i] += 1
        placed.append(i)
    return lifts


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
    lift = label_lifts(np.log10(table["x"]) if log_x else table["x"], table["y"])
    for j, row in table.iterrows():
        big = value_key(row[hue]) in marked
        ax.errorbar(row["x"], row["y"], xerr=row["x_std"], yerr=row["y_std"], fmt="*" if big else "o",
                    markersize=11 if big else 6, color=palette[j], ecolor=palette[j], elinewidth=0.7, capsize=2)
        ax.annotate(_hue_text(row[hue], hue_labels), (row["x"], row["y"]), textcoords="offset points",
                    xytext=(5, 4 + 9 * lift[j]), fontsize=7, fontweight="bold" if big else "normal",
                    color=palette[j] if lift[j] else "black")
    for _, row in (lines.iterrows() if lines is not None else ()):
        ax.axhline(row["y"], color="0.45", linestyle=":", linewidth=0.9)
        name = REFERENCE_ALGORITHMS.get(str(row[hue]), _hue_text(row[hue], hue_labels))
        ax.annotate(name, (1.0, row["y"]), xycoords=("axes fraction", "data"),
                    xytext=(-3, 2), textcoords="offset points", ha="right", fontsize=6.5, color="0.3")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(x_label or metric_label(x))
    ax.set_ylabel(y_label or metric_label(y))
    ax.grid(alpha=0.3)
    ax.margins(0.08)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, out_stem)


SCATTER_PLOT_KINDS = {"score_vs_cost": score_vs_cost}
