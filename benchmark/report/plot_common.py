"""What every figure of the report shares: reading and grouping records the way the tables do, hue
order and labels, palettes, markers, and saving PNG + PDF on a bare Agg figure. Part of the
report's figures (:mod:`benchmark.report.plots`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmark.record import Record
from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.record_filters import apply_filters, check_keys, check_uniform
from benchmark.report.records import aggregate, metric_column, records_frame, select_records, value_key
from benchmark.report.tables import metric_label

log = logging.getLogger(__name__)


_MAX_MARKED_POINTS = 30


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


def _prepare(records: Sequence[Record | Mapping[str, Any]], keys: Sequence[str], filters: Mapping[str, Any] | None,
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


def _seed_means(records: Sequence[Record | Mapping[str, Any]], keys: tuple[str, str], metric: str,
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
