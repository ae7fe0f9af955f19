"""Robustness and per-round plots (PNG + PDF), plus the area-under-curve robustness score.

Figures are drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas so nothing
depends on (or changes) the global pyplot backend; this runs headless. Records are grouped with
the same rules as the tables (:mod:`benchmark.report.records`), so a point on a plot is the same
average as the matching table cell; bands are +-1 sample std (ddof=1) over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from benchmark.record import Record, as_records
from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.plot_common import (
    _MARKERS,
    _MAX_MARKED_POINTS,
    _hue_order,
    _hue_text,
    _legend_below,
    _log_exclusions,
    _new_figure,
    _prepare,
    _save,
    _seed_means,
    _successful,
    _y_label,
)
from benchmark.report.records import STD_DDOF, metric_column, select_records, value_key
from benchmark.report.reference_rows import reference_means, reference_name, reference_note
from benchmark.report.robustness_figure import robustness_plot
from benchmark.report.tables import key_label


def round_curve_plot(
    records: Sequence[Record | Mapping[str, Any]],
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
    records = as_records(records)
    frame = _prepare(records, [hue], filters, what)
    selected, exclusions = select_records(frame, [hue])
    _log_exclusions(exclusions, what)
    ok = selected[selected["status"] == "ok"]
    points: list[dict[str, Any]] = []
    curve_keys: dict[str, None] = {}
    for idx, h in zip(ok.index, ok[hue]):
        curves = records[idx].curves or {}
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


def _same_along(grids: Sequence[np.ndarray], axis: int) -> bool:
    """Whether every column (``axis`` 1) or every row (``axis`` 0) of each grid equals the
    first one (NaN equal to NaN): the axis runs over two or more values and none changes
    anything."""
    if grids[0].shape[axis] < 2:
        return False
    first = (slice(None), slice(0, 1)) if axis == 1 else (slice(0, 1), slice(None))
    return all(np.allclose(g, g[first], rtol=1e-9, atol=1e-12, equal_nan=True) if g.dtype.kind == "f"
               else bool((g == g[first]).all()) for g in grids)


def heatmap_plot(
    records: Sequence[Record | Mapping[str, Any]],
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

    An axis along which nothing changes (every column, or every row, the same mean, std and
    failures, e.g. a weight the method switches off for the task) is dropped: the grid becomes
    one column (or row), a strip, and the title says which values of that key gave identical
    results.
    """
    what = f"heatmap of {metric} over {x} x {y}"
    every = as_records(records)
    # the method's grid; its reference rows (run once per setting) go in a note under the axis
    refs = reference_means(every, metric_column(metric), filters)
    agg = _seed_means([r for r in every if reference_name(r) is None], (x, y), metric, filters, what,
                      axes="x and y")
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

    dropped = []  # (key, its label, its values) of each axis along which nothing changes
    if _same_along([mean, std, failed], axis=1):
        mean, std, failed = mean[:, :1], std[:, :1], failed[:, :1]
        dropped.append((x, x_label or key_label(x), xs))
    if _same_along([mean, std, failed], axis=0):
        mean, std, failed = mean[:1, :], std[:1, :], failed[:1, :]
        dropped.append((y, y_label or key_label(y), ys))
    n_cols, n_rows = mean.shape[1], mean.shape[0]
    with sns.axes_style("white"):
        # a strip (one column or row left) is drawn narrower than a grid's three cells
        width = 1.0 + 0.9 * (max(n_cols, 3) if n_cols > 1 else 2)
        height = 0.9 + 0.7 * (max(n_rows, 3) if n_rows > 1 else 1.5)
        fig = Figure(figsize=(width, height), layout="constrained")
        ax = fig.add_subplot()
    masked = np.ma.masked_invalid(mean)
    image = ax.imshow(masked, cmap=cmap, aspect="auto", origin="lower")
    ax.set_facecolor("#d9d9d9")
    lo, hi = float(np.nanmin(mean)), float(np.nanmax(mean))
    if annotate:
        mid = (lo + hi) / 2.0
        for i in range(n_rows):
            for j in range(n_cols):
                if np.isnan(mean[i, j]):
                    ax.text(j, i, "failed" if failed[i, j] else "—", ha="center", va="center", fontsize=7,
                            color="black")
                    continue
                text = f"{mean[i, j]:.1f}" if percent else f"{mean[i, j]:.3g}"
                if not np.isnan(std[i, j]):
                    text += f"\n±{std[i, j]:.1f}" if percent else f"\n±{std[i, j]:.2g}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="white" if mean[i, j] < mid or hi == lo else "black")
    gone = {key for key, _, _ in dropped}
    ax.set_xticks([] if x in gone else range(n_cols))
    ax.set_xticklabels([] if x in gone else [_hue_text(v, None) for v in xs])
    ax.set_yticks([] if y in gone else range(n_rows))
    ax.set_yticklabels([] if y in gone else [_hue_text(v, None) for v in ys])
    note = reference_note(refs, percent)
    refs_line = f"references on the same data: {note}" if note else ""
    ax.set_xlabel(refs_line if x in gone else (x_label or key_label(x)) + (f"\n{refs_line}" if note else ""))
    ax.set_ylabel("" if y in gone else y_label or key_label(y))
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(_y_label(metric, percent))
    said = [f"{label} axis dropped: {', '.join(_hue_text(v, None) for v in values)} give identical results"
            for _, label, values in dropped]
    if said:
        ax.set_title("\n".join([title] * bool(title) + said), fontsize=10)
    elif title:
        ax.set_title(title)
    return _save(fig, out_stem)


PLOT_KINDS = {"robustness": robustness_plot, "heatmap": heatmap_plot, "round_curve": round_curve_plot}
