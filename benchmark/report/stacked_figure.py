"""Stacked bars: one bar per method, split into the parts a quantity is the sum of.

For a cost breakdown (FedMBridge Figure 3: a round's seconds split into local training,
download, upload and server knowledge sharing): each segment is a part's mean over seeds,
the whisker is the seed std of the record's total (the sum of its parts), and the total is
written at the bar's end. Parts are metric names as tables take them, so the record's cost
fields (``client_ms``, ``server_memory_mb``... in ``tables.RECORD_METRICS``) work as well as
``test/*`` metrics; values are drawn in their own units.

Weighted stacks (the paper's COT: 0.46 download + 0.46 upload + 0.08 server, the weights each
record carries in ``cost.cot_weights``) scale each part and add up to a named total (``cot_ms``,
the median of the per-round weighted sums the table shows). Parts too thin to read beside the
others are drawn again on panels of their own scale beside the stack.
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmark.record import Record
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
from benchmark.report.robustness_figure import _ink
from benchmark.report.table_records import RECORD_METRICS, record_field, with_record_metrics
from benchmark.report.tables import metric_label

log = logging.getLogger(__name__)

TOTAL = "_total"
# The cost stages keep one colour in every figure (a stage is the same colour in the round
# breakdown and in the COT breakdown); other parts take the palette in order.
STAGE_COLORS = {"client_ms": 0, "download_ms": 1, "upload_ms": 2, "server_ms": 3, "other_ms": 4}
ZOOM_SHARE = 0.1  # zoom="auto" redraws a part whose tallest segment is under this share of the tallest bar


def stack_means(records: Sequence[Record | Mapping[str, Any]], parts: Sequence[str], *, hue: str = "algorithm.name",
                filters: Mapping[str, Any] | None = None, hue_order: Sequence[Any] | None = None,
                what: str = "stacked bars", weights: Mapping[str, float] | str | None = None,
                total: str | None = None) -> pd.DataFrame:
    """Per ``hue`` value (rows, in ``hue_order``): each part's mean and std (``<part>_std``) over
    the successful seeds, the total's mean and std (``total``, ``total_std``) and the seed count
    ``n``. A value lacking a part in any of its records is left out with a warning (a partial
    stack would understate its total); none left is a DataError.

    ``weights`` scales each part (a mapping part -> weight, or the dotted record field holding
    one, e.g. ``cost.cot_weights``, keyed by part or by the record field the part reads);
    ``total`` names the metric a bar adds up to (e.g. ``cot_ms``): each record's parts are scaled
    to sum to it, so the bar is the number the table shows. The weights used are in
    ``attrs["weights"]``."""
    if not parts:
        raise ConfigError(f"{what}: needs at least one part")
    metrics = [*parts, total] if total else list(parts)
    records = with_record_metrics(records, metrics)
    frame = _prepare(records, [hue], filters, what)
    cols = [_metric_col(frame, p, what) for p in parts]
    total_col = _metric_col(frame, total, what) if total else None
    selected, exclusions = select_records(frame, [hue])
    _log_exclusions(exclusions, what)
    keep = _complete(selected[selected["status"] == "ok"], [*cols, *([total_col] if total_col else [])], hue,
                     parts, what)
    resolved = _weights(records, keep.index, parts, weights, what)
    keep = _weighted(keep, cols, [resolved.get(p, 1.0) for p in parts], total_col)
    agg = aggregate(keep, [hue], [*cols, TOTAL])
    table = pd.DataFrame([_stack_row(agg, hue, h, parts, cols)
                          for h in _hue_order(list(dict.fromkeys(agg[hue])), hue_order)])
    table.attrs["weights"] = resolved
    return table


def _complete(ok: pd.DataFrame, cols: Sequence[str], hue: str, parts: Sequence[str], what: str) -> pd.DataFrame:
    """The successful records of the hue values whose every record has every column."""
    complete = ok[list(cols)].notna().all(axis=1)
    for h in sorted({str(v) for v in ok.loc[~complete, hue]}):
        log.warning("%s: %s left out: a record lacks one of %s", what, h, ", ".join(parts))
    partial = {value_key(v) for v in ok.loc[~complete, hue]}
    keep = ok[complete & ~ok[hue].map(value_key).isin(partial)]
    if keep.empty:
        raise DataError(f"{what}: no method has all of {', '.join(parts)} in every successful record")
    return keep


def _weights(records: Sequence[Record | Mapping[str, Any]], index: Sequence[int], parts: Sequence[str],
             weights: Mapping[str, float] | str | None, what: str) -> dict[str, float]:
    """Each part's weight (empty without ``weights``); a field the records disagree on, or a
    part it has no weight for, is an error."""
    if weights is None:
        return {}
    if isinstance(weights, str):
        found = {json.dumps(record_field(records[i], weights), sort_keys=True) for i in index}
        if len(found) != 1 or not isinstance(record_field(records[index[0]], weights), Mapping):
            raise DataError(f"{what}: the records' '{weights}' is missing or differs between them: {sorted(found)}")
        weights = record_field(records[index[0]], weights)
    out = {p: weights.get(p, weights.get(_field_name(p))) for p in parts}
    lacking = [p for p, w in out.items() if not isinstance(w, (int, float)) or isinstance(w, bool)]
    if lacking:
        raise ConfigError(f"{what}: weights give no number for {', '.join(lacking)}")
    return {p: float(w) for p, w in out.items()}


def _field_name(part: str) -> str:
    """The record field a cost part reads, last step: 'download_ms' -> 'download_s'."""
    return RECORD_METRICS[part][0].rsplit(".", 1)[-1] if part in RECORD_METRICS else part


def _weighted(keep: pd.DataFrame, cols: Sequence[str], weights: Sequence[float], total_col: str | None) -> pd.DataFrame:
    """The records with their parts weighted and a ``TOTAL`` column: the sum of the parts, or
    ``total_col`` with the parts scaled per record to add up to it."""
    parts = keep[list(cols)].astype(float) * np.asarray(weights, dtype=float)
    sums = parts.sum(axis=1)
    if total_col is None:
        return keep.assign(**{c: parts[c] for c in cols}, **{TOTAL: sums})
    totals = keep[total_col].astype(float)
    factor = np.where(sums > 0, totals / sums.where(sums > 0, 1.0), 1.0)
    return keep.assign(**{c: parts[c] * factor for c in cols}, **{TOTAL: totals})


def _stack_row(agg: pd.DataFrame, hue: str, h: Any, parts: Sequence[str], cols: Sequence[str]) -> dict[str, Any]:
    """One bar: each part's mean and std, the total's mean and std, the seed count."""
    cell = agg[agg[hue].map(value_key) == value_key(h)].set_index("metric")
    row: dict[str, Any] = {hue: h}
    for p, c in zip(parts, cols):
        row[p] = float(cell.loc[c, "mean"])
        row[f"{p}_std"] = float(np.nan_to_num(cell.loc[c, "std"]))
    row.update(total=float(cell.loc[TOTAL, "mean"]), total_std=float(np.nan_to_num(cell.loc[TOTAL, "std"])),
               n=int(cell.loc[TOTAL, "n"]))
    return row


def part_colors(parts: Sequence[str]) -> dict[str, Any]:
    """A colour per part: the cost stages' own (:data:`STAGE_COLORS`) when all parts are
    stages, else the series palette in the parts' order."""
    if all(p in STAGE_COLORS for p in parts):
        palette = series_palette(len(STAGE_COLORS))
        return {p: palette[STAGE_COLORS[p]] for p in parts}
    return dict(zip(parts, series_palette(len(parts))))


def zoom_parts(table: pd.DataFrame, parts: Sequence[str], zoom: Sequence[str] | str | None) -> list[str]:
    """The parts drawn again on panels of their own: those listed, or for "auto" each part whose
    tallest segment is under :data:`ZOOM_SHARE` of the tallest bar (none when all are)."""
    if zoom is None or zoom == "none":
        return []
    if zoom != "auto":
        listed = [zoom] if isinstance(zoom, str) else list(zoom)
        unknown = [z for z in listed if z not in parts]
        if unknown:
            raise ConfigError(f"stacked bars: zoom names {', '.join(unknown)}, which is no part")
        return [p for p in parts if p in listed]
    tallest = float(table["total"].max())
    small = [p for p in parts if float(table[p].max()) < ZOOM_SHARE * tallest]
    return small if len(small) < len(parts) else []


def _labels(parts: Sequence[str], part_labels: Mapping[str, str] | None,
            weights: Mapping[str, float]) -> dict[str, str]:
    """Legend text per part, its weight in front where it has one other than 1."""
    out = {}
    for p in parts:
        label = (part_labels or {}).get(p, metric_label(p))
        w = weights.get(p, 1.0)
        out[p] = label if w == 1.0 else f"{w:g} × {label}"
    return out


def _weights_line(parts: Sequence[str], part_labels: Mapping[str, str] | None, weights: Mapping[str, float]) -> str:
    """'bar = 0.46 × Download + ...' when the parts are weighted, else ''."""
    if not weights or all(w == 1.0 for w in weights.values()):
        return ""
    return "bar = " + " + ".join(_labels(parts, part_labels, weights).values())


def stacked_bars(
    records: Sequence[Record | Mapping[str, Any]],
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
    weights: Mapping[str, float] | str | None = None,
    total: str | None = None,
    zoom: Sequence[str] | str | None = "auto",
) -> list[Path]:
    """One bar per ``hue`` value stacked from ``parts`` (bottom first), seed-std whisker on the
    total, total written at its end; write ``<out_stem>.png`` and ``.pdf``.

    ``weights`` and ``total`` as in :func:`stack_means` (a weighted stack states its weights in
    the legend and under the title). Parts too thin to read beside the others (``zoom``: "auto",
    a list of parts, or none) are drawn again, one panel each on its own scale, right of the
    stack; the bars then run horizontally so every panel shares the methods' rows."""
    what = f"stacked bars of {', '.join(parts)}"
    unknown = sorted(set(part_labels or {}) - set(parts))
    if unknown:
        raise ConfigError(f"{what}: part_labels names {', '.join(unknown)}, which is no part")
    table = stack_means(records, parts, hue=hue, filters=filters, hue_order=hue_order, what=what,
                        weights=weights, total=total)
    resolved = table.attrs["weights"]
    labels = _labels(parts, part_labels, resolved)
    value_label = y_label or " + ".join(metric_label(p) for p in parts)
    heading = "\n".join(t for t in (title, _weights_line(parts, part_labels, resolved)) if t)
    small = zoom_parts(table, parts, zoom)
    ticks = [_hue_text(h, hue_labels) for h in table[hue]]
    if small:
        fig = _zoomed_figure(table, parts, labels, small, ticks, value_label, heading, decimals)
    else:
        fig = _column_figure(table, parts, labels, ticks, value_label, heading, decimals)
    return _save(fig, out_stem)


def _column_figure(table: pd.DataFrame, parts: Sequence[str], labels: Mapping[str, str], ticks: Sequence[str],
                   value_label: str, heading: str, decimals: int) -> Figure:
    """Vertical stacked bars, a legend right of them: for stacks whose parts all read."""
    fig = Figure(figsize=(max(5.0, 1.0 * len(table) + 2.5), 4.2), layout="constrained")
    ax = fig.add_subplot()
    palette = part_colors(parts)
    xs = np.arange(len(table))
    bottom = np.zeros(len(table))
    for part in parts:
        heights = table[part].to_numpy()
        ax.bar(xs, heights, bottom=bottom, width=0.6, color=palette[part], label=labels[part], edgecolor="white",
               linewidth=0.5)
        bottom += heights
    ax.errorbar(xs, table["total"], yerr=table["total_std"], fmt="none", ecolor="black", capsize=3, linewidth=0.8)
    for x, tot, std in zip(xs, table["total"], table["total_std"]):
        ax.annotate(f"{tot:.{decimals}f}", (x, tot + std), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels(ticks, rotation=20, ha="right")
    ax.set_ylabel(value_label)
    ax.margins(y=0.12)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if heading:
        ax.set_title(heading, fontsize=10)
    return fig


def _zoomed_figure(table: pd.DataFrame, parts: Sequence[str], labels: Mapping[str, str], small: Sequence[str],
                   ticks: Sequence[str], value_label: str, heading: str, decimals: int) -> Figure:
    """The stack (horizontal bars, one row per method) and, right of it on the same rows, one
    panel per small part on its own scale, each bar with its value and seed-std whisker."""
    n, k = len(table), len(small)
    fig = Figure(figsize=(4.6 + 2.0 * k, 0.42 * n + 1.9), layout="constrained")
    axes = fig.subplots(1, 1 + k, sharey=True, gridspec_kw={"width_ratios": [2.3] + [1.0] * k})
    palette = part_colors(parts)
    ys = np.arange(n)
    left = np.zeros(n)
    main = axes[0]
    for part in parts:
        main.barh(ys, table[part], left=left, height=0.62, color=palette[part], label=labels[part],
                  edgecolor="white", linewidth=0.5)
        left += table[part].to_numpy()
    _bar_values(main, ys, table["total"], table["total_std"], [f"{v:.{decimals}f}" for v in table["total"]])
    main.legend(loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=min(len(parts), 2), fontsize=7.5,
                frameon=False, title="all stages, stacked", title_fontsize=8.5, handlelength=1.2, columnspacing=1.0)
    main.set_yticks(ys)
    main.set_yticklabels(ticks, fontsize=8.5)
    main.invert_yaxis()
    for ax, part in zip(axes[1:], small):
        ax.barh(ys, table[part], height=0.62, color=palette[part])
        _bar_values(ax, ys, table[part], table[f"{part}_std"], [_short(v) for v in table[part]])
        ax.set_title(textwrap.fill(labels[part], 22) + "\n(own scale)", fontsize=8.5, color=_ink(palette[part]),
                     fontweight="bold")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7.5)
        ax.grid(axis="x", color="#e6e6e6", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.margins(x=0.28)
        ax.set_xlim(left=0)
    fig.supxlabel(value_label, fontsize=9)
    if heading:
        fig.suptitle(heading, fontsize=10)
    return fig


def _bar_values(ax: Any, ys: np.ndarray, values: pd.Series, stds: pd.Series, texts: Sequence[str]) -> None:
    """Seed-std whiskers on horizontal bars and each bar's value right of its whisker."""
    ax.errorbar(values, ys, xerr=stds, fmt="none", ecolor="black", capsize=2.5, linewidth=0.7)
    for y, v, std, text in zip(ys, values, stds, texts):
        ax.annotate(text, (v + std, y), textcoords="offset points", xytext=(3, 0), va="center", fontsize=7)


def _short(value: float) -> str:
    """A small value with three significant digits: 0.00714, 0.752, 83.9."""
    return f"{value:.3g}"


STACKED_PLOT_KINDS = {"stacked_bar": stacked_bars}
