"""Fidelity of a table to its paper: does our ranking of the rows agree with the paper's?

Our small-scale runs use offline stand-ins for the papers' data, so our numbers are not the
papers' numbers; what can still be compared is the ordering. Per *column* (one column group x
metric, e.g. "DY (LP) · AUC") the rows (methods) that have both the paper's number and ours
are ranked both ways and compared with Kendall's tau-b (:func:`scipy.stats.kendalltau`; tau-b
because papers print ties, e.g. 0.124 twice). A column needs at least :data:`MIN_METHODS`
such rows: with two, tau is +-1 and says nothing.

Overall score: the mean of the per-column taus. Pooling every cell into one tau would compare
pairs across columns (FedAvg's accuracy on one dataset against FedGCN's MRR on another), whose
order says nothing about methods and mostly reflects the levels of the metrics; the mean keeps
every pair inside one column and gives each paper column equal weight, which is how a reader
reads the table. Columns of one dataset (accuracy and F1) are correlated and both count.

Interval: a bootstrap over seeds. Each draw resamples, per table cell (row x column group),
that cell's runs with replacement (the same runs for every metric of the cell, so accuracy and
F1 of one run stay together), recomputes our means and every column's tau, and averages them;
the interval is the percentile range of the draws (:data:`CONFIDENCE`, 1000 draws, a seeded
generator, so the same records always give the same interval). It measures how much the
agreement depends on which seeds ran, not how well the stand-in data match the paper's.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import kendalltau

from benchmark.errors import ConfigError, DataError

MIN_METHODS = 3
DRAWS = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class FidelityCell:
    """One table cell the paper reports a number for: its row, column group and metric, the
    paper's number and our value per run (keyed by any run id unique within the cell's row and
    group, e.g. the record's index; display units, the same as the paper's)."""

    row: Hashable
    group: Hashable
    metric: str
    paper: float
    runs: Mapping[Hashable, float]


@dataclass(frozen=True)
class ColumnTau:
    """Kendall tau-b of one column (group x metric) over ``n_methods`` rows."""

    group: Hashable
    metric: str
    tau: float
    n_methods: int


@dataclass(frozen=True)
class SkippedColumn:
    """A column with paper numbers that has no tau, and why."""

    group: Hashable
    metric: str
    n_methods: int
    reason: str


@dataclass(frozen=True)
class Fidelity:
    """Kendall tau between our ranking and the paper's: per column, their mean, and the
    bootstrap interval of the mean. ``tau`` (and the interval) are NaN when no column
    qualifies; ``measured`` says which."""

    columns: tuple[ColumnTau, ...]
    skipped: tuple[SkippedColumn, ...]
    tau: float
    low: float
    high: float
    n_methods: int
    draws: int
    confidence: float

    @property
    def measured(self) -> bool:
        return bool(self.columns)


def tau_b(ours: np.ndarray, paper: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each row of ``ours`` (draws x n) against ``paper`` (n,), vectorised.

    The bootstrap needs it for 1000 draws of every column of every table, which one
    :func:`scipy.stats.kendalltau` call per draw makes take seconds per table; this is the same
    statistic (tests check it against scipy), NaN where either side has no untied pair and
    where a value is NaN.
    """
    ours = np.atleast_2d(np.asarray(ours, dtype=float))
    paper = np.asarray(paper, dtype=float)
    if ours.shape[1] != paper.size:
        raise ValueError(f"tau_b: {ours.shape[1]} values of ours against {paper.size} of the paper")
    i, j = np.triu_indices(paper.size, k=1)
    d_paper = np.sign(paper[i] - paper[j])
    d_ours = np.sign(ours[:, i] - ours[:, j])
    concordance = (d_ours * d_paper).sum(axis=1)
    untied = (d_ours != 0).sum(axis=1) * float((d_paper != 0).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(untied > 0, concordance / np.sqrt(untied), math.nan)


def _usable(cells: Iterable[FidelityCell]) -> list[tuple[FidelityCell, dict[Hashable, float]]]:
    """Cells with a finite paper number and at least one finite value of ours (N/A, failed and
    missing cells drop out here), each with its finite run values; a repeated cell is an error."""
    seen: set[tuple[Hashable, Hashable, str]] = set()
    out = []
    for cell in cells:
        key = (cell.row, cell.group, cell.metric)
        if key in seen:
            raise DataError(f"fidelity: cell {key} is given twice")
        seen.add(key)
        if not isinstance(cell.paper, (int, float)) or isinstance(cell.paper, bool) or not math.isfinite(cell.paper):
            continue
        runs = {k: float(v) for k, v in cell.runs.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if runs:
            out.append((cell, runs))
    return out


def kendall_fidelity(cells: Iterable[FidelityCell], *, draws: int = DRAWS, seed: int = BOOTSTRAP_SEED,
                     confidence: float = CONFIDENCE, min_methods: int = MIN_METHODS) -> Fidelity:
    """Per-column Kendall tau-b between our means and the paper's numbers, their mean, and its
    bootstrap-over-runs interval (see the module docstring for why these choices)."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ConfigError(f"fidelity: draws must be a positive integer, got {draws!r}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"fidelity: confidence must be in (0, 1), got {confidence!r}")
    if isinstance(min_methods, bool) or not isinstance(min_methods, int) or min_methods < 2:
        raise ConfigError(f"fidelity: min_methods must be an integer of at least 2, got {min_methods!r}")
    usable = _usable(cells)
    by_column: dict[tuple[Hashable, str], list[tuple[FidelityCell, dict[Hashable, float]]]] = {}
    for cell, runs in usable:
        by_column.setdefault((cell.group, cell.metric), []).append((cell, runs))

    columns: list[ColumnTau] = []
    skipped: list[SkippedColumn] = []
    kept: list[list[tuple[FidelityCell, dict[Hashable, float]]]] = []
    for (group, metric), members in by_column.items():
        if len(members) < min_methods:
            skipped.append(SkippedColumn(group, metric, len(members),
                                         f"fewer than {min_methods} rows with the paper's number and ours"))
            continue
        ours = [float(np.mean(list(runs.values()))) for _, runs in members]
        tau = float(kendalltau(ours, [c.paper for c, _ in members]).statistic)
        if math.isnan(tau):
            skipped.append(SkippedColumn(group, metric, len(members), "every row ties, ours or the paper's"))
            continue
        columns.append(ColumnTau(group, metric, tau, len(members)))
        kept.append(members)

    n_methods = len({c.row for members in kept for c, _ in members})
    if not columns:
        return Fidelity((), tuple(skipped), math.nan, math.nan, math.nan, 0, 0, confidence)
    overall = float(np.mean([c.tau for c in columns]))
    samples = _bootstrap(kept, draws, seed)
    alpha = 100.0 * (1.0 - confidence) / 2.0
    low, high = (float(v) for v in np.percentile(samples, [alpha, 100.0 - alpha])) if samples.size else (
        math.nan, math.nan)
    return Fidelity(tuple(columns), tuple(skipped), overall, low, high, n_methods, int(samples.size), confidence)


def _bootstrap(kept: list[list[tuple[FidelityCell, dict[Hashable, float]]]], draws: int, seed: int) -> np.ndarray:
    """The mean column tau of each draw that gives one (draws where every column is NaN drop)."""
    rng = np.random.default_rng(seed)
    # one resampling of the runs per table cell (row x group), shared by the cell's metrics
    run_ids: dict[tuple[Hashable, Hashable], list[Hashable]] = {}
    for members in kept:
        for cell, runs in members:
            ids = run_ids.setdefault((cell.row, cell.group), [])
            ids.extend(k for k in runs if k not in ids)
    picks = {key: (ids, rng.integers(0, len(ids), size=(draws, len(ids)))) for key, ids in run_ids.items()}
    taus = np.empty((draws, len(kept)))
    for col, members in enumerate(kept):
        means = np.empty((draws, len(members)))
        for m, (cell, runs) in enumerate(members):
            ids, idx = picks[(cell.row, cell.group)]
            values = np.array([runs.get(k, math.nan) for k in ids])[idx]
            with np.errstate(invalid="ignore"):
                counts = (~np.isnan(values)).sum(axis=1)
                means[:, m] = np.where(counts > 0, np.nansum(values, axis=1) / np.maximum(counts, 1), math.nan)
        taus[:, col] = tau_b(means, np.array([c.paper for c, _ in members]))
    valid = ~np.isnan(taus)
    per_draw = np.where(valid.any(axis=1), np.nansum(taus, axis=1) / np.maximum(valid.sum(axis=1), 1), math.nan)
    return per_draw[~np.isnan(per_draw)]


def tau_text(fidelity: Fidelity, decimals: int = 2) -> str:
    """'0.52 [0.31, 0.70]': the mean tau and its interval (a dash when nothing was measured)."""
    if not fidelity.measured:
        return "-"
    point = number_text(fidelity.tau, decimals)
    if math.isnan(fidelity.low):
        return point
    return f"{point} [{number_text(fidelity.low, decimals)}, {number_text(fidelity.high, decimals)}]"


def number_text(value: float, decimals: int = 2) -> str:
    """A tau as text, never '-0.00'."""
    return f"{round(value, decimals) + 0.0:.{decimals}f}"


def plural(n: int, noun: str) -> str:
    """'1 column', '12 columns'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
