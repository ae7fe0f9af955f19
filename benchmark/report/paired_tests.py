"""Which methods of a table column are tied for first, by paired tests over seeds.

Why paired: every method of a store sees the same partition and missing-modality masks for a
given seed (one federated artifact per seed and setting, ``tests/test_paired_seeds.py``), so
a seed's draw moves every method alike and the per-seed differences are far less noisy than
the methods' own spreads. Why a gate: the column's best is chosen after looking, so testing
the others against it alone declares a difference too often (about 16% of null columns of 6
methods and 5 seeds, at a 5% level); an F-test over the whole column first (repeated-measures
ANOVA: methods x seeds, the seed as a block) keeps that below the level (2-3% in simulation).
Friedman's rank test would be the distribution-free gate, but with 3 seeds one swapped rank
already hides a 20-point gap from it; the F-test is the same model the paired t-tests assume.

The rule, at level ``alpha``:
1. Take the seeds every method of the column has (complete blocks); with fewer than
   :data:`MIN_SEEDS` nothing is resolved and every method is tied for first.
2. The repeated-measures F-test of "every method has the same mean" over those seeds (for two
   methods it is the two-sided paired t-test). Not significant: every method is tied for first.
3. Else each method against the best mean by a one-sided paired t-test, with Holm's
   correction across the column; a method not significantly below the best is tied for first.

A column whose scores are all equal within a seed (a constant reference) resolves nothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

#: the level of every test, and the fewest common seeds a column needs to resolve anything
ALPHA = 0.05
MIN_SEEDS = 3


@dataclass(frozen=True)
class ColumnTest:
    """The verdict on one column: who is tied for first, and how sure."""

    tied: frozenset[Hashable]
    best: Hashable | None
    seeds: int                                   # common seeds the tests used
    gate_p: float = math.nan                     # the repeated-measures F-test of the column
    below: dict[Hashable, float] = field(default_factory=dict)   # method -> Holm-adjusted p vs the best

    @property
    def resolved(self) -> bool:
        """Whether the column declares any method below its best."""
        return bool(self.below) and any(p <= ALPHA for p in self.below.values())


def _paired_p(x: np.ndarray, y: np.ndarray, alternative: str = "two-sided") -> float:
    """The paired t-test's p-value (1 when undefined). A difference that is the same in every
    seed is infinitely sure (p 0): scipy warns of precision loss there, which says nothing here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_rel(x, y, alternative=alternative).pvalue)
    return p if math.isfinite(p) else 1.0


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input order."""
    order = np.argsort(pvalues, kind="stable")
    m = len(pvalues)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted.tolist()


def repeated_measures_p(table: np.ndarray) -> float:
    """p-value of the F-test that every row (method) of ``table`` [methods x seeds] has the same
    mean, the seed a block (two-way ANOVA without replication); 1 when nothing varies."""
    k, n = table.shape
    grand = table.mean()
    ss_methods = n * float(((table.mean(axis=1) - grand) ** 2).sum())
    ss_seeds = k * float(((table.mean(axis=0) - grand) ** 2).sum())
    ss_error = float(((table - grand) ** 2).sum()) - ss_methods - ss_seeds
    df_methods, df_error = k - 1, (k - 1) * (n - 1)
    if ss_error <= 1e-12 * max(1.0, ss_methods):       # every seed moves the methods exactly alike
        return 0.0 if ss_methods > 0 else 1.0
    f = (ss_methods / df_methods) / (ss_error / df_error)
    return float(stats.f.sf(f, df_methods, df_error))


def tied_for_first(scores: Mapping[Hashable, Mapping[int, float]], higher_is_better: bool = True,
                   alpha: float = ALPHA) -> ColumnTest:
    """The methods of one column tied for first (see the module docstring): ``scores`` maps a
    method to its score per seed."""
    methods = [m for m, per_seed in scores.items() if per_seed]
    if not methods:
        return ColumnTest(frozenset(), None, 0)
    common = sorted(set.intersection(*(set(scores[m]) for m in methods)))
    sign = 1.0 if higher_is_better else -1.0
    table = np.array([[sign * float(scores[m][s]) for s in common] for m in methods]) if common else np.empty((0, 0))
    means = [sign * float(np.mean(list(scores[m].values()))) for m in methods]
    best = methods[int(np.argmax(means))]
    everyone = ColumnTest(frozenset(methods), best, len(common))
    if len(methods) < 2 or len(common) < MIN_SEEDS or not np.all(np.isfinite(table)):
        return everyone
    if float(np.ptp(table, axis=0).max()) == 0.0:
        return everyone                                        # every method scores the same in every seed
    gate = repeated_measures_p(table)
    if not math.isfinite(gate) or gate > alpha:
        return ColumnTest(frozenset(methods), best, len(common), gate)
    b = methods.index(best)
    others = [i for i in range(len(methods)) if i != b]
    raw = []
    for i in others:
        raw.append(_paired_p(table[b], table[i], "greater"))  # identical per-seed scores: p 1, no evidence
    adjusted = holm(raw)
    below = {methods[i]: p for i, p in zip(others, adjusted)}
    tied = frozenset([best] + [m for m, p in below.items() if p > alpha])
    return ColumnTest(tied, best, len(common), gate, below)


def adjacent_resolved(scores: Mapping[Hashable, Mapping[int, float]], higher_is_better: bool = True,
                      alpha: float = ALPHA) -> tuple[int, int]:
    """(resolved, total) adjacent pairs of the column ordered by mean: a pair is resolved when a
    two-sided paired t-test over its common seeds (at least :data:`MIN_SEEDS`) is significant at
    ``alpha``, uncorrected (each pair is its own question: which of two neighbours is ahead)."""
    sign = 1.0 if higher_is_better else -1.0
    methods = sorted((m for m, v in scores.items() if v), key=lambda m: -sign * float(np.mean(list(scores[m].values()))))
    resolved = 0
    for a, b in zip(methods, methods[1:]):
        common = sorted(set(scores[a]) & set(scores[b]))
        if len(common) < MIN_SEEDS:
            continue
        x = np.array([scores[a][s] for s in common], dtype=float)
        y = np.array([scores[b][s] for s in common], dtype=float)
        if np.all(x == y):
            continue
        resolved += int(_paired_p(x, y) <= alpha)
    return resolved, max(0, len(methods) - 1)


__all__ = ["ALPHA", "MIN_SEEDS", "ColumnTest", "adjacent_resolved", "holm", "repeated_measures_p", "tied_for_first"]
