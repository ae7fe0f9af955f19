"""The area under a robustness curve (trapezoid rule over the x values), a score the leaderboard
and the robustness AUC read; a metric, so it lives apart from the drawing code."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def curve_auc(x_values: Sequence[float], y_values: Sequence[float]) -> float:
    """Trapezoid area under y(x) divided by the x range, i.e. the mean height of the curve.

    Normalising by the range keeps the score in the metric's units, so methods evaluated on the
    same x grid compare directly. A single point gives its y; a NaN anywhere gives NaN (a failed
    point makes the score undefined rather than silently better).
    """
    x = np.asarray(x_values, dtype=float)
    y = np.asarray(y_values, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"curve_auc needs two 1-d sequences of equal length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("curve_auc needs at least one point")
    if np.isnan(x).any() or np.isnan(y).any():
        return math.nan
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    width = x[-1] - x[0]
    if width == 0:
        return float(y.mean())
    area = float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))
    return area / width
