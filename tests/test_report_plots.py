"""Robustness/round-curve plots write real PNG and PDF files; AUC arithmetic."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from benchmark.errors import ConfigError
from benchmark.report.curve_metrics import curve_auc
from benchmark.report.robustness_figure import robustness_auc, robustness_plot
from benchmark.report.plots import round_curve_plot

ALGS = {"local": 0.6, "fedavg": 0.8, "fedprox": 0.78}


def record(alg: str, seed: int, *, rate: float = 0.3, alpha: float = 0.5, status: str = "ok",
           acc: float | None = None) -> dict[str, Any]:
    acc = ALGS[alg] - 0.1 * rate + 0.02 * math.log10(alpha) + 0.01 * seed if acc is None else acc
    ok = status == "ok"
    rounds = list(range(8))
    return {
        "suite": "demo", "scale": "tiny", "cell_id": f"{alg}-{rate}-{alpha}",
        "params": {"algorithm.name": alg, "missing.rate": rate, "partition.alpha": alpha},
        "seed": seed, "status": status, "error": None if ok else {"round": 2, "reason": "NaN loss"},
        "metrics": {"test/accuracy": acc} if ok else {},
        "curves": {"round": rounds, "val/accuracy": [acc * (1 - 0.5 ** (r + 1)) for r in rounds],
                   "bytes_up": [1000 * (r + 1) for r in rounds]},
        "provenance": {"artifact_recipe": "r", "protocol": "p"},
        "timestamp": "2024-05-01T00:00:00",
    }


def assert_files(paths: list[Path]) -> None:
    png, pdf = paths
    assert png.suffix == ".png" and pdf.suffix == ".pdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000


def test_robustness_plot_missing_rate(tmp_path: Path) -> None:
    recs = [record(a, s, rate=r) for a in ALGS for r in (0.0, 0.3, 0.5, 0.7) for s in range(3)]
    recs += [record("local", s, rate=0.9, status="failed") for s in range(3)]
    recs += [record(a, s, rate=0.9) for a in ("fedavg", "fedprox") for s in range(3)]
    paths = robustness_plot(recs, "missing.rate", "accuracy", out_stem=tmp_path / "figs" / "robust_rate",
                            title="Missing-rate robustness", hue_labels={"fedavg": "FedAvg"})
    assert_files(paths)
    assert paths[0].name == "robust_rate.png"


def test_robustness_plot_alpha_log_scale(tmp_path: Path) -> None:
    recs = [record(a, s, alpha=al) for a in ALGS for al in (0.1, 0.5, 1.0, 10.0) for s in range(3)]
    assert_files(robustness_plot(recs, "partition.alpha", "accuracy", out_stem=tmp_path / "robust_alpha",
                                 filters={"missing.rate": 0.3}))
    with pytest.raises(ConfigError, match="x and hue"):
        robustness_plot(recs, "algorithm.name", "accuracy", out_stem=tmp_path / "bad")


def test_plot_needs_filters_when_other_params_vary(tmp_path: Path) -> None:
    recs = [record(a, s, rate=r, alpha=al) for a in ALGS for r in (0.0, 0.5) for al in (0.1, 1.0)
            for s in range(2)]
    with pytest.raises(ConfigError, match="partition.alpha.*filters"):
        robustness_plot(recs, "missing.rate", "accuracy", out_stem=tmp_path / "x")
    with pytest.raises(ConfigError, match="unknown|no record"):
        robustness_plot(recs, "missing.rte", "accuracy", out_stem=tmp_path / "x", filters={"partition.alpha": 1})
    assert_files(robustness_plot(recs, "missing.rate", "accuracy", out_stem=tmp_path / "ok",
                                 filters={"partition.alpha": 1.0}))


def test_round_curve_plot(tmp_path: Path) -> None:
    recs = [record(a, s) for a in ALGS for s in range(3)] + [record("local", 3, status="failed")]
    assert_files(round_curve_plot(recs, "val/accuracy", out_stem=tmp_path / "curves", title="Validation"))
    assert_files(round_curve_plot(recs, "bytes_up", out_stem=tmp_path / "bytes", percent=False))
    with pytest.raises(ConfigError, match="curve keys in the records"):
        round_curve_plot(recs, "val/acc", out_stem=tmp_path / "none")


def test_curve_auc() -> None:
    assert curve_auc([0.0, 0.5, 1.0], [0.8, 0.8, 0.8]) == pytest.approx(0.8)
    assert curve_auc([0.0, 1.0], [1.0, 0.0]) == pytest.approx(0.5)
    assert curve_auc([0.7, 0.0, 0.3], [0.5, 0.9, 0.8]) == pytest.approx(
        (0.3 * (0.9 + 0.8) / 2 + 0.4 * (0.8 + 0.5) / 2) / 0.7)  # unsorted input is sorted first
    assert curve_auc([0.3], [0.7]) == pytest.approx(0.7)
    assert math.isnan(curve_auc([0.0, 1.0], [0.5, float("nan")]))
    with pytest.raises(ValueError):
        curve_auc([0.0, 1.0], [0.5])


def test_robustness_auc() -> None:
    recs = [record(a, s, rate=r) for a in ALGS for r in (0.0, 0.5, 1.0) for s in range(3)]
    recs = [r for r in recs if not (r["params"]["algorithm.name"] == "local" and r["params"]["missing.rate"] == 1.0)]
    auc = robustness_auc(recs, "missing.rate", "accuracy")
    # linear in rate: mean over [0, 1] equals the value at 0.5; seeds add 0.01 * mean(0, 1, 2)
    assert auc["fedavg"] == pytest.approx(100 * (0.8 - 0.05 + 0.02 * math.log10(0.5) + 0.01))
    assert auc["fedprox"] < auc["fedavg"]
    assert math.isnan(auc["local"])


@pytest.mark.parametrize("n", [3, 10, 12, 17])
def test_every_series_gets_its_own_colour(n):
    from benchmark.report.plot_common import series_palette

    assert len({tuple(round(c, 4) for c in rgb) for rgb in series_palette(n)}) == n


def _rank_records(means: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    out = []
    for (setting, algo), m in means.items():
        for seed, d in enumerate((-0.01, 0.0, 0.01)):
            out.append({"suite": "s", "scale": "tiny", "cell_id": f"{setting}-{algo}", "seed": seed, "status": "ok",
                        "params": {"setting": setting, "algorithm.name": algo},
                        "metrics": {"test/accuracy": m + d}, "provenance": {},
                        "timestamp": "2026-01-01T00:00:00+00:00"})
    return out


def test_rank_chart_ranks_each_column_and_rejects_one_column(tmp_path, monkeypatch):
    import benchmark.report.rank_figure as rf
    from benchmark.errors import DataError

    means = {("a", "x"): 0.9, ("a", "y"): 0.5, ("a", "z"): 0.7, ("b", "x"): 0.4, ("b", "y"): 0.8, ("b", "z"): 0.6}
    paths = rf.rank_chart(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "ranks", x_order=["a", "b"])
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)
    drawn: list[tuple] = []  # the rank lines of the figure, read back instead of saved
    monkeypatch.setattr(rf, "_save", lambda fig, stem: drawn.extend(
        tuple(line.get_ydata()) for line in fig.axes[0].lines) or [])
    rf.rank_chart(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "r2", x_order=["a", "b"],
                  hue_order=["x", "y", "z"])
    assert drawn == [(1, 3), (3, 1), (2, 2)]
    with pytest.raises(DataError, match="at least two"):
        rf.rank_chart(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "r3", filters={"setting": "a"})


def test_rank_chart_leaves_reference_rows_unranked_and_notes_them(tmp_path, monkeypatch):
    """Chance, linear and the centralized GNN are not competitors: a reference above every
    method must not push the methods down a rank; its mean per column is written under the
    chart instead."""
    import benchmark.report.rank_figure as rf

    means = {("a", "x"): 0.9, ("a", "y"): 0.5, ("b", "x"): 0.4, ("b", "y"): 0.8,
             ("a", "centralized"): 0.95, ("b", "centralized"): 0.97, ("a", "chance"): 0.1, ("b", "chance"): 0.1}
    seen: dict[str, Any] = {}

    def keep(fig, stem):
        seen["lines"] = [tuple(line.get_ydata()) for line in fig.axes[0].lines]
        seen["label"] = fig.axes[0].get_xlabel()
        return []

    monkeypatch.setattr(rf, "_save", keep)
    rf.rank_chart(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "r", x_order=["a", "b"],
                  x_labels={"a": "Split A", "b": "Split B"})
    assert seen["lines"] == [(1, 2), (2, 1)]
    assert "Split A: Chance 10.0 · Centralized GNN 95.0" in seen["label"]
    assert "Split B: Chance 10.0 · Centralized GNN 97.0" in seen["label"]


def test_contrast_chart_draws_one_bar_per_method_and_value(tmp_path, monkeypatch):
    import benchmark.report.contrast_figure as cf
    from benchmark.errors import DataError

    means = {("keep", "x"): 0.9, ("shuffle", "x"): 0.2, ("keep", "y"): 0.5, ("shuffle", "y"): 0.5}
    paths = cf.contrast_bars(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "c",
                             x_order=["keep", "shuffle"])
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)
    heights: list[float] = []  # the bars of the figure, read back instead of saved
    monkeypatch.setattr(cf, "_save", lambda fig, stem: heights.extend(
        round(b.get_height(), 6) for b in fig.axes[0].patches) or [])
    cf.contrast_bars(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "c2",
                     x_order=["keep", "shuffle"], hue_order=["x", "y"])
    assert heights == [90.0, 50.0, 20.0, 50.0]  # keep bars (x, y), then shuffle bars
    with pytest.raises(DataError, match="at least two"):
        cf.contrast_bars(_rank_records(means), "setting", "accuracy", out_stem=tmp_path / "c3",
                         filters={"setting": "keep"})
