"""Tied-for-first by paired tests over seeds (benchmark/report/paired_tests.py): the level
holds on tables whose methods share one distribution, and a real gap is found."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.report.paired_tests import ALPHA, MIN_SEEDS, holm, tied_for_first

METHODS, SEEDS, TABLES = 6, 5, 200


def _table(rng: np.random.Generator, gap_sd: float = 0.0) -> dict[str, dict[int, float]]:
    """One column: a shared per-seed effect (the seed's partition and masks) plus each method's
    own noise, both of SD 1, so a method's seed SD is sqrt(2); method m0 is ``gap_sd`` of
    those SDs above the rest."""
    seed_effect = rng.normal(0.0, 1.0, SEEDS)
    scores = seed_effect + rng.normal(0.0, 1.0, (METHODS, SEEDS))
    scores[0] += gap_sd * np.sqrt(2.0)
    return {f"m{i}": {s: float(scores[i, s]) for s in range(SEEDS)} for i in range(METHODS)}


def test_methods_from_one_distribution_are_rarely_told_apart():
    rng = np.random.default_rng(2024)
    declared = sum(tied_for_first(_table(rng)).resolved for _ in range(TABLES))
    assert declared <= 0.10 * TABLES, declared


def test_a_gap_of_three_seed_sds_is_found():
    rng = np.random.default_rng(7)
    verdicts = [tied_for_first(_table(rng, gap_sd=3.0)) for _ in range(TABLES)]
    found = sum(v.resolved and v.best == "m0" for v in verdicts)
    assert found >= 0.90 * TABLES, found


def test_the_best_alone_is_first_when_every_other_is_far_below():
    scores = {"a": {0: 0.90, 1: 0.91, 2: 0.92, 3: 0.90}, "b": {0: 0.60, 1: 0.62, 2: 0.61, 3: 0.63},
              "c": {0: 0.50, 1: 0.52, 2: 0.49, 3: 0.51}}
    v = tied_for_first(scores)
    assert v.tied == {"a"} and v.resolved and v.seeds == 4


def test_lower_is_better_flips_the_best():
    scores = {"a": {0: 0.90, 1: 0.91, 2: 0.92, 3: 0.90}, "b": {0: 0.10, 1: 0.12, 2: 0.11, 3: 0.13},
              "c": {0: 0.50, 1: 0.52, 2: 0.49, 3: 0.51}}
    assert tied_for_first(scores, higher_is_better=False).tied == {"b"}


def test_too_few_common_seeds_or_equal_scores_resolve_nothing():
    few = {"a": {0: 0.9, 1: 0.9}, "b": {0: 0.1, 1: 0.1}, "c": {0: 0.5, 1: 0.5, 2: 0.5}}
    assert MIN_SEEDS == 3 and tied_for_first(few).tied == {"a", "b", "c"} and not tied_for_first(few).resolved
    same = {m: {s: 0.5 + 0.01 * s for s in range(5)} for m in "abc"}
    assert tied_for_first(same).tied == {"a", "b", "c"}


def test_holm_matches_its_definition():
    p = [0.01, 0.04, 0.03, 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 -> 4 x 0.01, max(., 3 x 0.03), max(., 2 x 0.04), max(., 1 x 0.2)
    assert holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert ALPHA == 0.05


def test_the_gate_is_the_paired_t_test_for_two_methods():
    """For two methods the repeated-measures F equals the squared paired t: the same p-value."""
    from scipy import stats

    from benchmark.report.paired_tests import repeated_measures_p

    rng = np.random.default_rng(3)
    table = rng.normal(size=(2, 6)) + np.array([[0.0], [0.8]])
    assert repeated_measures_p(table) == pytest.approx(float(stats.ttest_rel(table[0], table[1]).pvalue))
