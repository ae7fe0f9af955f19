"""Stacked bars: one bar per method, split into the parts a quantity is the sum of.

For a cost breakdown (FedMBridge Figure 3: a round's seconds split into local training,
download, upload and server knowledge sharing): each segment is a part's mean over seeds,
the whisker is the seed std of the record's total (the sum of its parts), and the total is
written above the bar. Parts are metric names as tables take them, so the record's cost
fields (``client_ms``, ``server_memory_mb``... in ``tables.RECORD_METRICS``) work as well as
``test/*`` metrics; values are drawn in their own units.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmark.errors import ConfigError, DataError
from benchmark.report.plots import _hue_order, _hue_text, _log_exclusions, _metric_col, _prepare, _save, series_palette
from benchmark.report.records import aggregate, select_records, value_key
from benchmark.report.tables import metric_label, with_record_metrics

log = logging.getLogger(__name__)

TOTAL = "_total"


def stack_means(records: Sequence[Mapping[str, Any]], parts: Sequence[str], *, hue: str = "algorithm.name",
                filters: Mapping[str, Any] | None = None, hue_order: Sequence[Any] | None = None,
                what: str = "stacked bars") -> pd.DataFrame:
    """Per ``hue`` value (rows, in ``hue_order``): each part's mean over the successful seeds,
    the total's mean and std (``total``, ``total_std``) and the seed count ``n``. A value
    lacking a part in any of its records is left out with a warning (a partial stack would
    understate its total); none left is a DataError."""
    if not parts:
        raise ConfigError(f"{what}: needs at least one part")
    frame = _prepare(with_record_metrics(records, parts), [hue], filters, what)
    cols = [_metric_col(frame, p, what) for p in parts]
    selected, exclusions = select_records(frame, [hue])
    _log_exclusions(exclusions, what)
    ok = selected[selected["status"] == "ok"]
    complete = ok[cols].notna().all(axis=1)
    for h in sorted({str(v) for v in ok.loc[~complete, hue]}):
        log.warning("%s: %s left out: a record lacks one of %s", what, h, ", ".join(parts))
    partial = {value_key(v) for v in ok.loc[~complete, hue]}
    keep = ok[complete & ~ok[hue].map(value_key).isin(partial)]
    if keep.empty:
        raise DataError(f"{what}: no method has all of {', '.join(parts)} in every successful record")
    agg = aggregate(keep.assign(**{TOTAL: keep[cols].sum(axis=1)}), [hue], [*cols, TOTAL])
    rows = []
    for h in _hue_order(list(dict.fromkeys(agg[hue])), hue_order):
        cell = agg[agg[hue].map(value_key) == value_key(h)].set_index("metric")
        rows.append({hue: h, **{p: float(cell.loc[c, "mean"]) for p, c in zip(parts, cols)},
                     "total": float(cell.loc[TOTAL, "mean"]), "total_std": float(np.nan_to_num(cell.loc[TOTAL, "std"])),
                     "n": int(cell.loc[TOTAL, "n"])})
    return pd.DataFrame(rows)


def stacked_bars(
    records: Sequence[Mapping[str, Any]],
    parts: Sequence[str],
    *,
    hue: str = "algorithm.name",
    out_stem: str | Path,
    part_labels: Mapping[str, str] | None = None,
    hue_order: Sequence[Any] | None = None,
    hue_labels: Mapping[Any, str] | None = None,
    filters: Mapping[str, Any] | None = None,
    title: str = "",
    y_label: str = "",
    decimals: int = 2,
) -> list[Path]:
    """One bar per ``hue`` value stacked from ``parts`` (bottom first), seed-std whisker on the
    total, total written above; write ``<out_stem>.png`` and ``.pdf``."""
    what = f"stacked bars of {', '.join(parts)}"
    unknown = sorted(set(part_labels or {}) - set(parts))
    if unknown:
        raise ConfigError(f"{what}: part_labels names {', '.join(unknown)}, which is no part")
    table = stack_means(records, parts, hue=hue, filters=filters, hue_order=hue_order, what=what)
    fig = Figure(figsize=(max(5.0, 1.0 * len(table) + 2.5), 4.2), layout="constrained")
    ax = fig.add_subplot()
    palette = series_palette(len(parts))
    xs = np.arange(len(table))
    bottom = np.zeros(len(table))
    for j, part in enumerate(parts):
        heights = table[part].to_numpy()
        ax.bar(xs, heights, bottom=bottom, width=0.6, color=palette[j],
               label=(part_labels or {}).get(part, metric_label(part)), edgecolor="white", linewidth=0.5)
        bottom += heights
    ax.errorbar(xs, table["total"], yerr=table["total_std"], fmt="none", ecolor="black", capsize=3, linewidth=0.8)
    for x, total, std in zip(xs, table["total"], table["total_std"]):
        ax.annotate(f"{total:.{decimals}f}", (x, total + std), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([_hue_text(h, hue_labels) for h in table[hue]], rotation=20, ha="right")
    ax.set_ylabel(y_label or " + ".join(metric_label(p) for p in parts))
    ax.margins(y=0.12)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, out_stem)


STACKED_PLOT_KINDS = {"stacked_bar": stacked_bars}
