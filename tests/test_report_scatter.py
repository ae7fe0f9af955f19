"""Score-vs-cost figures (report/scatter_figure.py): the points are seed means of both
quantities, close labels are lifted apart, and the efficiency suite's figure is drawn from
its committed store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmark.errors import ConfigError, DataError
from benchmark.report.scatter_figure import label_lifts, point_means, score_vs_cost
from benchmark.report.suite_plots import plot_kinds


def record(alg: str, seed: int, acc: float | None, secs: float | None, status: str = "ok") -> dict[str, Any]:
    return {
        "suite": "s", "scale": "tiny", "cell_id": alg, "params": {"algorithm.name": alg}, "seed": seed,
        "status": status, "error": None if status == "ok" else {"round": 1, "reason": "NaN"},
        "metrics": {} if acc is None else {"test/accuracy": acc}, "seconds_per_round": secs,
        "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": f"2024-05-01T00:00:0{seed}",
    }


def test_points_are_seed_means_of_both_axes_without_failed_seeds():
    recs = [record("b", 0, 0.6, 2.0), record("b", 1, 0.8, 4.0), record("b", 2, 0.1, 9.0, status="failed"),
            record("a", 0, 0.3, 1.0)]
    table = point_means(recs, "seconds_per_round", "accuracy", hue_order=["b", "a"])
    assert table["algorithm.name"].tolist() == ["b", "a"]
    b = table.iloc[0]
    assert (b["x"], b["y"], b["n"]) == (pytest.approx(3.0), pytest.approx(0.7), 2)
    assert b["x_std"] == pytest.approx(1.414213562, rel=1e-6) and b["y_std"] == pytest.approx(0.141421356, rel=1e-6)
    assert table.iloc[1]["x_std"] == 0.0  # one seed: no whisker


def test_bad_axes_are_clear_errors():
    recs = [record("a", 0, 0.3, 1.0)]
    with pytest.raises(ConfigError, match="same metric"):
        point_means(recs, "accuracy", "accuracy")
    with pytest.raises(ConfigError, match="bogus"):
        point_means(recs, "seconds_per_round", "bogus")
    with pytest.raises(DataError, match="no successful record"):
        point_means([record("a", 0, 0.3, None), record("b", 0, None, 1.0)], "seconds_per_round", "accuracy")


def test_close_labels_are_lifted_and_far_ones_are_not():
    # two points nearly on top of each other, one far to the right at the same height
    assert label_lifts([1.0, 1.01, 10.0], [0.5, 0.5, 0.5]) == [0, 1, 0]
    assert label_lifts([1.0, 10.0], [0.0, 1.0]) == [0, 0]
    # a third close point climbs past both
    assert label_lifts([1.0, 1.0, 1.0, 9.0], [0.50, 0.50, 0.501, 0.0]) == [0, 1, 2, 0]


def test_score_vs_cost_writes_png_and_pdf_and_is_a_plot_kind(tmp_path: Path):
    assert plot_kinds()["score_vs_cost"] is score_vs_cost
    recs = [record(a, s, 0.2 * (i + 1) + 0.01 * s, 0.5 * (i + 1)) for i, a in enumerate("abc") for s in range(3)]
    png, pdf = score_vs_cost(recs, "seconds_per_round", "accuracy", out_stem=tmp_path / "f" / "eff",
                             hue_labels={"a": "Alpha"}, highlight=["c"], log_x=True, title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with pytest.raises(DataError, match="log_x"):
        score_vs_cost([record("a", 0, 0.3, 0.0), record("b", 0, 0.3, 1.0)], "seconds_per_round", "accuracy",
                      out_stem=tmp_path / "bad", log_x=True)


def test_reference_rows_are_lines_not_points(tmp_path: Path, monkeypatch):
    """Chance costs nothing, so on a log axis it could not be a point: every reference is a
    horizontal line at its mean score, and the methods' points are what ``point_means`` gives
    without them."""
    import benchmark.report.scatter_figure as sf

    recs = [record(a, s, 0.3 + 0.1 * i, 1.0 + i) for i, a in enumerate(("fedavg", "fedmpo")) for s in range(2)]
    recs += [record("chance", s, 0.2, 0.0) for s in range(2)] + [record("linear", s, 0.45, 0.01) for s in range(2)]
    drawn: list[float] = []
    real = sf.Figure.add_subplot

    def spy(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        ax = real(self, *a, **k)
        original = ax.axhline
        ax.axhline = lambda y, **kw: (drawn.append(y), original(y, **kw))[1]
        return ax

    monkeypatch.setattr(sf.Figure, "add_subplot", spy)
    png, _ = score_vs_cost(recs, "seconds_per_round", "accuracy", out_stem=tmp_path / "eff", log_x=True)
    assert png.exists() and sorted(drawn) == pytest.approx([0.2, 0.45])
    assert point_means(recs[:4], "seconds_per_round", "accuracy")["algorithm.name"].tolist() == ["fedavg", "fedmpo"]


def test_efficiency_suite_draws_its_score_vs_cost_figures_from_the_committed_store(tmp_path: Path):
    from fedmm_bench.cli import write_suite_plots
    from tests.small_results import load_small

    suite, records, _ = load_small("efficiency")
    written = {p.name for p in write_suite_plots(suite, records, "small", str(tmp_path))}
    assert {"efficiency_small_accuracy_vs_seconds.png", "efficiency_small_accuracy_vs_comm.png"} <= written
