"""Contrast chart: one group of bars per method, one bar per value of a categorical param.

For a control (real vs shuffled content, say): a method whose two bars are equal scored the
same without the thing the control removes. Bars are means over seeds with +-1 std whiskers;
the value is written on each bar so the figure reads without the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from benchmark.record import Record
from benchmark.report.plot_common import (
    _categories,
    _hue_text,
    _save,
    _seed_means,
    _successful,
    _y_label,
    series_palette,
)
from benchmark.report.records import value_key


def contrast_bars(
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
    percent: bool = True,
) -> list[Path]:
    """Mean ``metric`` per (``hue`` group, ``x`` bar) with seed-std whiskers."""
    what = f"contrast chart of {metric} over {x}"
    agg = _successful(_seed_means(records, (hue, x), metric, filters, what), metric, what)
    bars, groups = _categories(agg, x, hue, x_order, hue_order, what)
    table = {(value_key(r[hue]), value_key(r[x])): (float(r["mean"]), float(r["std"])) for _, r in agg.iterrows()}

    scale = 100.0 if percent else 1.0
    width = 0.8 / len(bars)
    fig = Figure(figsize=(max(6.0, 0.9 * len(groups) + 2.0), 4.2), layout="constrained")
    ax = fig.add_subplot()
    palette = series_palette(len(bars))
    for j, b in enumerate(bars):
        xs, means, stds = [], [], []
        for i, g in enumerate(groups):
            if (value_key(g), value_key(b)) in table:  # a method undefined for the task has no bar
                mean, std = table[(value_key(g), value_key(b))]
                xs.append(i + (j - (len(bars) - 1) / 2) * width)
                means.append(mean * scale)
                stds.append(np.nan_to_num(std) * scale)
        drawn = ax.bar(xs, means, width=width * 0.95, yerr=stds, capsize=2, color=palette[j],
                       label=_hue_text(b, x_labels), error_kw={"linewidth": 0.8})
        ax.bar_label(drawn, labels=[f"{m:.0f}" for m in means], fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([_hue_text(g, hue_labels) for g in groups], rotation=20, ha="right")
    ax.set_ylabel(_y_label(metric, percent))
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, out_stem)


CONTRAST_PLOT_KINDS = {"contrast": contrast_bars}
