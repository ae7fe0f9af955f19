"""Figures of the KG track (the seed paper's Figures 5-8), drawn from result records.

Each function takes records (the store format) and writes ``<out_stem>.png`` and ``.pdf``;
a suite's ``plots:`` entry names one with ``kind:`` (see ``KG_PLOT_KINDS``), so
``python run_benchmark.py plot mmfed3_fig8 --scale small`` draws it. Records are grouped by
the same rules as tables (:mod:`benchmark.report.records`: latest recipe/protocol per cell,
failed seeds never averaged), and every band or error bar is +-1 sample std over seeds.

- ``facet_lines``: metric vs a numeric parameter, one line per method, one panel per
  dataset (Figure 8, MRR vs availability rate r).
- ``sensitivity``: one panel per hyperparameter of a one-at-a-time sweep (Figure 7); the
  records of a panel are those whose cell varied that parameter.
- ``rank_bars``: grouped bars with the rank of each bar inside its group written above it
  (Figure 6, HidE's reconstruction networks).
- ``server_client_curves``: per-round validation curves of the server and the client view
  (Figure 5), from ``record.curves`` keys such as ``val_server/mrr``; a method that keeps
  a single model has no such keys and is drawn dashed from ``val/mrr`` in both panels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmark.record import Record, as_records
from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.kg_figure_common import (
    _facet_values,
    _figure_legend,
    _finish,
    _grid,
    _label,
    _metric_text,
    _palette,
    _rows_of,
)
from benchmark.report.plot_common import _MARKERS, _hue_order, _hue_text, _log_exclusions, _metric_col, _prepare, _save
from benchmark.report.record_filters import apply_filters, check_keys, check_uniform
from benchmark.report.records import STD_DDOF, aggregate, availability_columns, records_frame, select_records, value_key
from benchmark.report.tables import key_label, metric_label


def facet_lines(
    records: Sequence[Record | Mapping[str, Any]],
    x: str,
    metric: str | Sequence[str],
    *,
    hue: str = "algorithm.name",
    facet: str | None = "partition.num_clients",
    out_stem: str | Path,
    title: str = "",
    hue_labels: Mapping[Any, str] | None = None,
    hue_order: Sequence[Any] | None = None,
    facet_labels: Mapping[Any, str] | None = None,
    facet_order: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    percent: bool = False,
    x_label: str | None = None,
    measured_availability: bool = False,
) -> list[Path]:
    """Mean ``metric`` vs ``x`` with a +-1 std band, one line per ``hue`` value, one panel
    per ``facet`` value (columns) and per metric (rows, when several are given). ``x_label``
    overrides the axis title (the KG track's ``missing.rate`` is an *availability* rate r).
    ``measured_availability`` adds under each tick the share of entities that held a
    modality in those runs (mean over modalities and runs, from ``record.availability``),
    since the rate r a masker is given is not what the models meet (Figure 8)."""
    metrics = [metric] if isinstance(metric, str) else list(metric)
    what = f"facet_lines of {', '.join(metrics)} vs {x}"
    keys = [k for k in (x, hue, facet) if k]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{what}: x, hue and facet must be different keys, got {keys}")
    frame = _prepare(records, keys, filters, what)
    cols = [_metric_col(frame, m, what) for m in metrics]
    selected, exclusions = select_records(frame, keys)
    _log_exclusions(exclusions, what)
    agg = aggregate(selected, keys, cols)
    agg["_x"] = pd.to_numeric(agg[x], errors="coerce")
    if agg["_x"].isna().any():
        raise ConfigError(f"{what}: x param '{x}' must be numeric")
    if not (agg["n"] > 0).any():
        raise DataError(f"{what}: no successful record has {', '.join(cols)}")
    facets = _facet_values(agg, facet, facet_order)
    hues = _hue_order(agg[hue].tolist(), hue_order)
    palette = _palette(len(hues))
    scale = 100.0 if percent else 1.0
    fig, axes = _grid(len(metrics), len(facets))
    ticks = sorted(set(agg["_x"].tolist()))
    measured = _measured_by_x(selected, x, facet) if measured_availability else {}
    for r, col in enumerate(cols):
        for c, fv in enumerate(facets):
            ax = axes[r, c]
            part = _rows_of(agg[agg["metric"] == col], facet, fv)
            for i, h in enumerate(hues):
                line = _rows_of(part, hue, h)
                line = line[line["n"] > 0].sort_values("_x")
                if line.empty:
                    continue
                xs = line["_x"].to_numpy()
                mean = line["mean"].to_numpy() * scale
                std = np.nan_to_num(line["std"].to_numpy()) * scale
                ax.plot(xs, mean, marker=_MARKERS[i % len(_MARKERS)], markersize=4, linewidth=1.5,
                        color=palette[i], label=_hue_text(h, hue_labels))
                ax.fill_between(xs, mean - std, mean + std, color=palette[i], alpha=0.18, linewidth=0)
            ax.set_xticks(ticks)
            shares = measured.get(value_key(fv) if fv is not None else None, {})
            ax.set_xticklabels([f"{t:g}" + (f"\n({shares[t]:.2f})" if t in shares else "") for t in ticks],
                               fontsize=7)
            if r == len(cols) - 1:
                ax.set_xlabel((x_label or key_label(x)) + ("\n(measured share holding a modality)" if measured else ""))
            if c == 0:
                ax.set_ylabel(_metric_text(metrics[r], percent))
            if fv is not None and r == 0:
                ax.set_title(_label(fv, facet_labels, facet), fontsize=9)
    return _finish(fig, axes, title, out_stem)


def _measured_by_x(selected: pd.DataFrame, x: str, facet: str | None) -> dict[Any, dict[float, float]]:
    """Per facet value (normalised key; None without facets) and x value: the mean over
    successful runs and modalities of the measured availability. Empty when no record has it."""
    present = availability_columns(selected)
    ok = selected[selected["status"] == "ok"]
    if not present or ok.empty:
        return {}
    share = ok[present].mean(axis=1, skipna=True)
    out: dict[Any, dict[float, list[float]]] = {}
    for idx, value in share.items():
        if pd.isna(value):
            continue
        fv = value_key(ok.at[idx, facet]) if facet else None
        out.setdefault(fv, {}).setdefault(float(ok.at[idx, x]), []).append(float(value))
    return {fv: {xv: float(np.mean(v)) for xv, v in by_x.items()} for fv, by_x in out.items()}


def sensitivity(
    records: Sequence[Record | Mapping[str, Any]],
    params: Sequence[str],
    metric: str = "mrr",
    *,
    hue: str = "partition.num_clients",
    out_stem: str | Path,
    title: str = "",
    param_labels: Mapping[str, str] | None = None,
    hue_labels: Mapping[Any, str] | None = None,
    hue_order: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    percent: bool = False,
) -> list[Path]:
    """One panel per hyperparameter in ``params``: mean ``metric`` (+-1 std) at each value the
    sweep tried, one line per ``hue`` value (datasets). Values sit at evenly spaced positions
    (a sensitivity grid is usually geometric) labelled with the value itself."""
    params = list(params)
    if not params:
        raise ConfigError("sensitivity plot needs at least one param")
    what = f"sensitivity plot of {metric}"
    if not records:
        raise DataError(f"{what}: no result records to plot")
    frame = records_frame(records)  # uniformity is checked per panel: each varies its own param
    check_keys(frame, [hue], what)
    frame = apply_filters(frame, filters, what)
    if frame.empty:
        raise ConfigError(f"{what}: filters {dict(filters or {})} match no records")
    col = _metric_col(frame, metric, what)
    missing = [p for p in params if p not in frame.columns]
    if missing:
        known = list(frame.attrs.get("param_keys", []))
        raise ConfigError(f"{what}: no record varies {', '.join(missing)}{closest(missing[0], known)}; "
                          f"params in the records: {', '.join(known)}")
    hues = _hue_order(frame[hue].dropna().tolist(), hue_order)
    palette = _palette(len(hues))
    scale = 100.0 if percent else 1.0
    fig, axes = _grid(1, len(params))
    drawn = False
    for c, p in enumerate(params):
        ax = axes[0, c]
        # the panel's records: cells that varied p and none of the other listed params
        others = [q for q in params if q != p]
        keep = frame[p].map(value_key) != "null"
        for q in others:
            keep &= frame[q].map(value_key) == "null"
        sub = frame[keep]
        if sub.empty:
            ax.set_title(f"{(param_labels or {}).get(p, key_label(p))} (no runs)", fontsize=9)
            continue
        check_uniform(sub, [hue, p], what)
        selected, exclusions = select_records(sub, [hue, p])
        _log_exclusions(exclusions, what)
        agg = aggregate(selected, [hue, p], [col])
        values = _hue_order(agg[p].tolist(), None)
        pos = {value_key(v): i for i, v in enumerate(values)}
        for i, h in enumerate(hues):
            line = _rows_of(agg, hue, h)
            line = line[line["n"] > 0].copy()
            if line.empty:
                continue
            line["_pos"] = line[p].map(lambda v: pos[value_key(v)])
            line = line.sort_values("_pos")
            mean = line["mean"].to_numpy() * scale
            std = np.nan_to_num(line["std"].to_numpy()) * scale
            ax.plot(line["_pos"], mean, marker=_MARKERS[i % len(_MARKERS)], markersize=4, linewidth=1.5,
                    color=palette[i], label=_label(h, hue_labels, hue))
            ax.fill_between(line["_pos"], mean - std, mean + std, color=palette[i], alpha=0.18, linewidth=0)
            drawn = True
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([f"{v:g}" if isinstance(v, float) else str(v) for v in values], fontsize=7)
        ax.set_xlabel((param_labels or {}).get(p, key_label(p)))
        if c == 0:
            ax.set_ylabel(_metric_text(metric, percent))
    if not drawn:
        raise DataError(f"{what}: no successful record has '{col}'")
    return _finish(fig, axes, title, out_stem)


def rank_bars(
    records: Sequence[Record | Mapping[str, Any]],
    bars: str,
    metrics: Sequence[str] = ("hits@1", "hits@3", "hits@10", "mrr"),
    *,
    group: str = "partition.num_clients",
    out_stem: str | Path,
    title: str = "",
    bar_labels: Mapping[Any, str] | None = None,
    bar_order: Sequence[Any] | None = None,
    group_labels: Mapping[Any, str] | None = None,
    group_order: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    percent: bool = False,
) -> list[Path]:
    """One panel per metric: groups (datasets) on x, one bar per ``bars`` value with a +-1 std
    error bar, and the bar's rank within its group (1 = best mean) written above it."""
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    what = f"rank bars of {bars}"
    keys = [bars, group]
    frame = _prepare(records, keys, filters, what)
    cols = [_metric_col(frame, m, what) for m in metrics]
    selected, exclusions = select_records(frame, keys)
    _log_exclusions(exclusions, what)
    agg = aggregate(selected, keys, cols)
    if not (agg["n"] > 0).any():
        raise DataError(f"{what}: no successful record has {', '.join(cols)}")
    groups = _hue_order(agg[group].tolist(), group_order)
    names = _hue_order(agg[bars].tolist(), bar_order)
    palette = _palette(len(names))
    scale = 100.0 if percent else 1.0
    width = 0.8 / max(len(names), 1)
    fig, axes = _grid(1, len(metrics))
    for c, col in enumerate(cols):
        ax = axes[0, c]
        part = agg[agg["metric"] == col]
        top = 0.0
        for gi, g in enumerate(groups):
            cell = _rows_of(part, group, g)
            cell = cell[cell["n"] > 0]
            order = cell.sort_values("mean", ascending=False, kind="stable")[bars].map(value_key).tolist()
            for bi, b in enumerate(names):
                row = _rows_of(cell, bars, b)
                if row.empty:
                    continue
                mean = float(row["mean"].iloc[0]) * scale
                std = float(np.nan_to_num(row["std"].iloc[0])) * scale
                xpos = gi - 0.4 + width * (bi + 0.5)
                ax.bar(xpos, mean, width=width * 0.92, color=palette[bi], yerr=std, capsize=2,
                       error_kw={"linewidth": 0.8}, label=_hue_text(b, bar_labels))
                ax.annotate(str(order.index(value_key(b)) + 1), (xpos, mean + std), textcoords="offset points",
                            xytext=(0, 2), ha="center", fontsize=7)
                top = max(top, mean + std)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([_label(g, group_labels, group) for g in groups], fontsize=8)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        ax.set_title(metric_label(metrics[c]), fontsize=9)
        if c == 0:
            ax.set_ylabel("score (%)" if percent else "score")
    return _finish(fig, axes, title, out_stem)


def server_client_curves(
    records: Sequence[Record | Mapping[str, Any]],
    metric: str = "mrr",
    *,
    views: Mapping[str, str] | None = None,
    fallback: str = "val",
    hue: str = "algorithm.name",
    facet: str | None = "partition.num_clients",
    out_stem: str | Path,
    title: str = "",
    hue_labels: Mapping[Any, str] | None = None,
    hue_order: Sequence[Any] | None = None,
    facet_labels: Mapping[Any, str] | None = None,
    facet_order: Sequence[Any] | None = None,
    filters: Mapping[str, Any] | None = None,
    percent: bool = False,
) -> list[Path]:
    """Per-round ``<split>/<metric>`` curves (mean over seeds, +-1 std band): one column per
    view (default server = ``val_server``, client = ``val_client``), one row per ``facet``
    value, one line per ``hue`` value. A record without a view's curve (a method with a
    single model) falls back to ``<fallback>/<metric>`` and is drawn dashed."""
    views = dict(views or {"Server": "val_server", "Client": "val_client"})
    what = f"server/client curves of {metric}"
    records = as_records(records)
    keys = [k for k in (hue, facet) if k]
    frame = _prepare(records, keys, filters, what)
    selected, exclusions = select_records(frame, keys)
    _log_exclusions(exclusions, what)
    ok = selected[selected["status"] == "ok"]
    points: list[dict[str, Any]] = []
    seen_keys: set[str] = set()
    for idx in ok.index:
        curves = records[idx].curves or {}
        seen_keys.update(curves)
        rounds = curves.get("round") or []
        for view, split in views.items():
            key, dashed = f"{split}/{metric}", False
            if key not in curves:
                key, dashed = f"{fallback}/{metric}", True
            ys = curves.get(key)
            if ys is None:
                continue
            if len(ys) != len(rounds):
                raise DataError(f"{what}: record {idx} has {len(rounds)} rounds but {len(ys)} values of '{key}'")
            for xv, yv in zip(rounds, ys):
                if yv is None:
                    continue
                points.append({"view": view, "hue": ok.at[idx, hue], "facet": ok.at[idx, facet] if facet else None,
                               "x": float(xv), "y": float(yv), "dashed": dashed})
    if not points:
        wanted = [f"{s}/{metric}" for s in [*views.values(), fallback]]
        raise ConfigError(f"{what}: no successful record has any of the curves {', '.join(wanted)}; "
                          f"curve keys in the records: {', '.join(sorted(seen_keys)) or '(none)'}")
    data = pd.DataFrame(points)
    data["hue_key"] = data["hue"].map(value_key)
    data["facet_key"] = data["facet"].map(value_key)
    stats = (data.groupby(["view", "facet_key", "hue_key", "x"])
             .agg(mean=("y", "mean"), std=("y", "std"), count=("y", "size"), dashed=("dashed", "max"))
             .reset_index())
    stats["std"] = np.where(stats["count"] > STD_DDOF, stats["std"], 0.0)
    hues = _hue_order(data["hue"].drop_duplicates().tolist(), hue_order)
    facets = _hue_order(data["facet"].drop_duplicates().tolist(), facet_order) if facet else [None]
    palette = _palette(len(hues))
    scale = 100.0 if percent else 1.0
    fig, axes = _grid(len(facets), len(views))
    any_dashed = False
    for r, fv in enumerate(facets):
        for c, view in enumerate(views):
            ax = axes[r, c]
            for i, h in enumerate(hues):
                line = stats[(stats["view"] == view) & (stats["facet_key"] == value_key(fv))
                             & (stats["hue_key"] == value_key(h))].sort_values("x")
                if line.empty:
                    continue
                dashed = bool(line["dashed"].any())
                any_dashed |= dashed
                mean = line["mean"].to_numpy() * scale
                std = line["std"].to_numpy() * scale
                ax.plot(line["x"], mean, linestyle="--" if dashed else "-", linewidth=1.4, color=palette[i],
                        marker=_MARKERS[i % len(_MARKERS)] if len(line) <= 30 else None, markersize=3,
                        label=_hue_text(h, hue_labels))
                ax.fill_between(line["x"], mean - std, mean + std, color=palette[i], alpha=0.15, linewidth=0)
            head = view if fv is None else f"{view} · {_label(fv, facet_labels, facet)}"
            ax.set_title(head, fontsize=9)
            if r == len(facets) - 1:
                ax.set_xlabel("Round")
            if c == 0:
                ax.set_ylabel(_metric_text(f"val/{metric}", percent))
    note = f"dashed: one model, '{fallback}/{metric}' in both panels" if any_dashed else ""
    if title or note:
        fig.suptitle("\n".join(t for t in (title, note) if t), fontsize=9)
    _figure_legend(fig, axes)
    return _save(fig, out_stem)


KG_PLOT_KINDS = {
    "facet_lines": facet_lines,
    "sensitivity": sensitivity,
    "rank_bars": rank_bars,
    "server_client_curves": server_client_curves,
}


__all__ = ["KG_PLOT_KINDS", "facet_lines", "rank_bars", "sensitivity", "server_client_curves"]
