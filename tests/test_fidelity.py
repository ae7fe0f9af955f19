"""The fidelity score: Kendall tau between our ranking and the paper's, per column, its mean,
and the bootstrap interval over seeds; and its sentence in a table's caption."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import kendalltau

from benchmark.errors import ConfigError, DataError
from benchmark.report.fidelity import FidelityCell, kendall_fidelity, tau_b, tau_text
from benchmark.report.tables import make_table

METHODS = ("a", "b", "c", "d", "e")


def cells(paper: dict[str, float], ours: dict[str, list[float]], group: Any = ("g",),
          metric: str = "acc") -> list[FidelityCell]:
    """One column: the paper's number and our per-seed values per method."""
    return [FidelityCell(m, group, metric, paper[m], dict(enumerate(ours[m]))) for m in paper]


def noisy(means: dict[str, float], spread: float = 4.0, seeds: int = 5) -> dict[str, list[float]]:
    """Seeds scattered around each mean, far enough apart that resampling moves the ranking."""
    rng = np.random.default_rng(3)
    return {m: list(v + spread * rng.standard_normal(seeds)) for m, v in means.items()}


PAPER = {m: 10.0 * (i + 1) for i, m in enumerate(METHODS)}  # a < b < c < d < e


def test_identical_ranking_is_one_and_reversed_is_minus_one() -> None:
    same = kendall_fidelity(cells(PAPER, {m: [v / 10 + 0.01 * s for s in range(3)] for m, v in PAPER.items()}))
    assert same.tau == pytest.approx(1.0) and same.columns[0].tau == pytest.approx(1.0) and same.n_methods == 5
    assert (same.low, same.high) == (1.0, 1.0)  # seeds never cross: every draw ranks alike
    reversed_ = kendall_fidelity(cells(PAPER, {m: [-v, -v + 0.1, -v + 0.2] for m, v in PAPER.items()}))
    assert reversed_.tau == pytest.approx(-1.0) and (reversed_.low, reversed_.high) == (-1.0, -1.0)


def test_ties_use_tau_b_as_scipy_does() -> None:
    paper = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 3.0}
    ours = {"a": [5.0], "b": [6.0], "c": [6.0], "d": [7.0]}
    fid = kendall_fidelity(cells(paper, ours))
    expected = kendalltau([5, 6, 6, 7], [1, 1, 2, 3]).statistic
    assert fid.tau == pytest.approx(expected) and 0 < fid.tau < 1


def test_vectorised_tau_b_equals_scipy() -> None:
    rng = np.random.default_rng(7)
    for n in (3, 5, 12, 22):
        paper = rng.integers(0, 4, size=n).astype(float)  # many ties
        ours = rng.integers(0, 5, size=(40, n)).astype(float)
        got = tau_b(ours, paper)
        want = [kendalltau(row, paper).statistic for row in ours]
        np.testing.assert_allclose(got, want, equal_nan=True)
    assert math.isnan(tau_b(np.array([[1.0, 1.0, 1.0]]), np.array([1.0, 2.0, 3.0]))[0])  # no untied pair


def test_interval_contains_the_point_estimate() -> None:
    means = {"a": 10.0, "b": 14.0, "c": 12.0, "d": 20.0, "e": 18.0}
    fid = kendall_fidelity(cells(PAPER, noisy(means)))
    assert fid.low < fid.high  # the seeds are noisy enough to move the ranking
    assert fid.low <= fid.tau <= fid.high
    assert fid.draws == 1000 and fid.confidence == 0.95
    assert tau_text(fid) == f"{fid.tau:.2f} [{fid.low:.2f}, {fid.high:.2f}]"


def test_bootstrap_is_seeded() -> None:
    paper = {f"m{i}": float(i) for i in range(10)}
    means = {f"m{i}": 2.0 * i for i in range(10)}
    data = [c for g in range(3) for c in cells(paper, noisy(means, spread=3.0 + g), group=(g,))]
    first, again = kendall_fidelity(data), kendall_fidelity(data)
    assert first == again
    other = [kendall_fidelity(data, seed=s) for s in (1, 2, 3)]
    assert any((o.low, o.high) != (first.low, first.high) for o in other)  # the seed is what fixes it
    assert all(o.tau == first.tau for o in other)  # the point estimate does not resample


def test_metrics_of_one_run_are_resampled_together() -> None:
    """Accuracy and F1 of a run stay paired in a draw: two identical metrics give the same
    interval as one (resampled apart, their average would be narrower)."""
    means = {"a": 10.0, "b": 14.0, "c": 12.0, "d": 20.0, "e": 18.0}
    one = kendall_fidelity(cells(PAPER, noisy(means), metric="acc"))
    two = kendall_fidelity(cells(PAPER, noisy(means), metric="acc") + cells(PAPER, noisy(means), metric="f1"))
    assert len(two.columns) == 2 and (two.low, two.high) == (one.low, one.high)


def test_overall_is_the_mean_of_the_columns() -> None:
    up = cells(PAPER, {m: [v] for m, v in PAPER.items()}, group=("x",))
    down = cells(PAPER, {m: [-v] for m, v in PAPER.items()}, group=("y",))
    half = cells(PAPER, {"a": [1.0], "b": [2.0], "c": [3.0], "d": [5.0], "e": [4.0]}, group=("z",))
    fid = kendall_fidelity(up + down + half)
    assert [c.tau for c in fid.columns] == [pytest.approx(1.0), pytest.approx(-1.0), pytest.approx(0.8)]
    assert fid.tau == pytest.approx(0.8 / 3)


def test_columns_with_fewer_than_three_comparable_methods_are_skipped() -> None:
    wide = cells(PAPER, {m: [v] for m, v in PAPER.items()}, group=("x",))
    narrow = cells({"a": 1.0, "b": 2.0}, {"a": [2.0], "b": [1.0]}, group=("y",))
    fid = kendall_fidelity(wide + narrow)
    assert [c.group for c in fid.columns] == [("x",)] and fid.tau == pytest.approx(1.0)
    assert [(s.group, s.n_methods) for s in fid.skipped] == [(("y",), 2)]
    only_narrow = kendall_fidelity(narrow)
    assert not only_narrow.measured and math.isnan(only_narrow.tau) and tau_text(only_narrow) == "-"


def test_na_and_empty_cells_are_skipped() -> None:
    """A cell the paper reports N/A (no number) or we have no value for leaves the column; with
    it gone, only three methods remain and they rank alike."""
    data = cells(PAPER, {m: [v] for m, v in PAPER.items()})
    data[0] = FidelityCell("a", ("g",), "acc", math.nan, {0: 99.0})  # paper: N/A
    data[1] = FidelityCell("b", ("g",), "acc", 20.0, {0: math.nan})  # ours: no value
    fid = kendall_fidelity(data)
    assert fid.columns[0].n_methods == 3 and fid.tau == pytest.approx(1.0) and fid.n_methods == 3


def test_constant_column_is_skipped_with_its_reason() -> None:
    fid = kendall_fidelity(cells(PAPER, {m: [1.0] for m in PAPER}))
    assert not fid.measured and "tie" in fid.skipped[0].reason


def test_bad_input_is_a_clear_error() -> None:
    data = cells(PAPER, {m: [v] for m, v in PAPER.items()})
    with pytest.raises(DataError, match="given twice"):
        kendall_fidelity(data + data[:1])
    with pytest.raises(ConfigError, match="draws"):
        kendall_fidelity(data, draws=0)
    with pytest.raises(ConfigError, match="confidence"):
        kendall_fidelity(data, confidence=1.5)


# --- through make_table ------------------------------------------------------------------------

RATES = (0.0, 0.5)
BASE = {"local": 0.50, "fedavg": 0.70, "fedprox": 0.72, "fedgcn": 0.60}


def _record(alg: str, rate: float, seed: int) -> dict[str, Any]:
    acc = BASE[alg] - 0.2 * rate + 0.01 * seed
    return {
        "suite": "t", "scale": "tiny", "cell_id": f"{alg}-{rate}",
        "params": {"algorithm.name": alg, "missing.rate": rate}, "seed": seed, "status": "ok", "error": None,
        "metrics": {"test/accuracy": acc, "test/macro_f1": acc - 0.05},
        "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": "2025-01-01T00:00:00",
    }


RECORDS = [_record(a, r, s) for a in BASE for r in RATES for s in range(3)]
# The paper agrees with our order except that it puts fedgcn first at rate 0.5.
PAPER_SPEC = {a: {r: {"accuracy": 100 * BASE[a] - 20 * r + (30 if (a, r) == ("fedgcn", 0.5) else 0)}
                  for r in RATES} for a in BASE}
SPEC: dict[str, Any] = {"rows": "algorithm.name", "columns": "missing.rate", "metrics": ["accuracy", "macro_f1"],
                        "column_labels": {0.0: "0%", 0.5: "50%"}, "paper": PAPER_SPEC}


def test_caption_states_the_fidelity_in_markdown_and_latex() -> None:
    out = make_table(RECORDS, SPEC)
    fid = out.fidelity
    assert fid is not None and [c.group for c in fid.columns] == [(0.0,), (0.5,)]  # F1 has no paper numbers
    # at 50% the paper puts fedgcn above fedavg and fedprox, we put it below: 2 of 6 pairs discordant
    assert [c.tau for c in fid.columns] == [pytest.approx(1.0), pytest.approx(1 / 3)]
    assert fid.tau == pytest.approx(2 / 3)
    sentence = f"Kendall τ between our ranking of the rows and the paper's = {tau_text(fid)}"
    assert sentence in out.markdown
    assert "per column: 0% · Accuracy 1.00, 50% · Accuracy 0.33." in out.markdown
    assert r"Kendall $\tau$ between our ranking of the rows and the paper's = " + tau_text(fid) in out.latex
    assert r"95\% bootstrap interval over seeds, 1000 draws" in out.latex


def test_no_fidelity_without_paper_numbers_or_ranking() -> None:
    plain = {k: v for k, v in SPEC.items() if k != "paper"}
    assert make_table(RECORDS, plain).fidelity is None and "Fidelity" not in make_table(RECORDS, plain).markdown
    stats = make_table(RECORDS, {**SPEC, "emphasis": False})  # a table of statistics ranks nothing
    assert stats.fidelity is None and "Fidelity" not in stats.markdown


def test_na_rows_of_the_table_stay_out_of_the_score() -> None:
    out = make_table(RECORDS, {**SPEC, "na": {"fedgcn": ["accuracy"]}})
    assert out.fidelity is not None and out.fidelity.n_methods == 3 and out.fidelity.tau == pytest.approx(1.0)


def test_too_few_methods_says_so_in_the_caption() -> None:
    spec = {**SPEC, "paper": {a: PAPER_SPEC[a] for a in ("local", "fedavg")}}
    out = make_table(RECORDS, spec)
    assert out.fidelity is not None and not out.fidelity.measured
    assert "Fidelity: no column has the paper's number and ours for 3 or more rows" in out.markdown
