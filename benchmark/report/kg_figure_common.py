"""What the KG figures share: a grid of panels, one palette, labels from the suite, facets, a
figure-wide legend, and saving. Part of :mod:`benchmark.report.kg_figures`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from benchmark.report.plot_common import _hue_order, _hue_text, _save, series_palette
from benchmark.report.records import value_key
from benchmark.report.tables import key_label, metric_label

_PANEL_W, _PANEL_H = 3.6, 2.9


def _grid(n_rows: int, n_cols: int) -> tuple[Figure, np.ndarray]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(_PANEL_W * n_cols, _PANEL_H * n_rows + 0.6), layout="constrained")
        axes = np.asarray(fig.subplots(n_rows, n_cols, squeeze=False))
    return fig, axes


def _palette(n: int) -> list[Any]:
    return list(series_palette(n))


def _label(value: Any, labels: Mapping[Any, str] | None, key: str | None = None) -> str:
    """A value's display label; without one, 'Key=value' so a panel says what it shows."""
    text = _hue_text(value, labels)
    if key and (not labels or value_key(value) not in {value_key(k) for k in labels}):
        return f"{key_label(key)}={text}"
    return text


def _facet_values(frame: pd.DataFrame, facet: str | None, order: Sequence[Any] | None) -> list[Any]:
    if facet is None:
        return [None]
    return _hue_order(frame[facet].dropna().tolist(), order)


def _rows_of(frame: pd.DataFrame, key: str | None, value: Any) -> pd.DataFrame:
    if key is None:
        return frame
    return frame[frame[key].map(value_key) == value_key(value)]


def _figure_legend(fig: Figure, axes: np.ndarray) -> None:
    """One legend under all panels (each label once), so no panel's lines are hidden."""
    seen: dict[str, Any] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(len(seen), 5),
                   frameon=False, fontsize=8)


def _finish(fig: Figure, axes: np.ndarray, title: str, out_stem: str | Path) -> list[Path]:
    """The common tail of every KG figure: optional suptitle, one shared legend, PNG + PDF."""
    if title:
        fig.suptitle(title, fontsize=10)
    _figure_legend(fig, axes)
    return _save(fig, out_stem)


def _metric_text(metric: str, percent: bool) -> str:
    text = metric_label(metric)
    return f"{text} (%)" if percent else text
