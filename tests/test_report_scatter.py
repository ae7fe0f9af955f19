"""Score-vs-cost figures (report/scatter_figure.py): the points are seed means of both
quantities, no two labels print over each other however crowded the points, the same records
give the same layout, and the efficiency suite's figure is drawn from its committed store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from benchmark.errors import ConfigError, DataError
from benchmark.report.scatter_figure import place_labels, point_means, score_vs_cost
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


Box = tuple[float, float, float, float]


def _boxes(points: list[tuple[float, float]], sizes: list[tuple[float, float]],
           offsets: list[tuple[float, float]]) -> list[Box]:
    return [(px + dx, py + dy, px + dx + w, py + dy + h) for (px, py), (w, h), (dx, dy) in zip(points, sizes, offsets)]


def _clash(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_labels_of_points_on_top_of_each_other_are_placed_apart_and_a_lone_one_stays_put():
    points = [(100.0, 100.0)] * 5 + [(400.0, 100.0)]
    sizes = [(30.0, 8.0)] * 6
    fixed = [(90.0, 120.0, 160.0, 128.0)]  # a reference line's name just above the pile
    offsets = place_labels(points, sizes, fixed=fixed)
    boxes = _boxes(points, sizes, offsets)
    assert not any(_clash(a, b) for i, a in enumerate(boxes + fixed) for b in (boxes + fixed)[i + 1:])
    assert offsets[5] == offsets[0] == (5.0, 2.0)  # nothing near: right of the point, where the first one went
    assert offsets == place_labels(points, sizes, fixed=fixed)  # deterministic


def _crowded() -> list[dict[str, Any]]:
    """The efficiency figure's crowd: twelve methods between 2.9 and 4.6 MiB a round, two far
    to the left, three seeds each; the chance line far below stretches the score axis, so that
    the old placement (labels lifted by fractions of the points' own span) printed four pairs
    of labels over each other."""
    cluster = [(2950, 0.532), (3050, 0.466), (3080, 0.562), (3100, 0.425), (3150, 0.465), (3300, 0.575),
               (3700, 0.426), (3750, 0.368), (4400, 0.455), (4450, 0.449), (4500, 0.438), (4600, 0.491)]
    points = [(48.0, 0.54), (540.0, 0.54)] + cluster
    return [record(f"method-{k:02d}", s, acc + 0.01 * (s - 1), kib) for k, (kib, acc) in enumerate(points)
            for s in range(3)]


def _render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recs: list[dict[str, Any]], **kw: Any) -> Any:
    import benchmark.report.scatter_figure as sf

    figures = []
    monkeypatch.setattr(sf, "_save", lambda fig, stem: figures.append(fig) or [])
    score_vs_cost(recs, "seconds_per_round", "accuracy", out_stem=tmp_path / "eff", **kw)
    return figures[0]


@pytest.mark.parametrize("dpi", [100, 200])  # as drawn, and as the PNG is written
def test_no_two_labels_overlap_in_a_crowded_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dpi: int):
    recs = _crowded() + [record("linear", s, 0.41, 0.01) for s in range(2)] + [record("chance", s, 0.19, 0.0)
                                                                                for s in range(2)]
    fig = _render(monkeypatch, tmp_path, recs, log_x=True, highlight=["method-13"], title="crowded")
    fig.set_dpi(dpi)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    texts = [t for t in ax.texts if t.get_text()]
    assert len(texts) == 14 + 2  # a label per method and a name per reference line
    boxes = [t.get_window_extent(renderer) for t in texts]
    clashes = [(texts[i].get_text(), texts[j].get_text()) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
               if boxes[i].overlaps(boxes[j])]
    assert clashes == []


def test_the_same_records_give_the_same_layout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    first, second = (_render(monkeypatch, tmp_path, _crowded(), log_x=True) for _ in range(2))
    assert [t.xyann for t in first.axes[0].texts] == [t.xyann for t in second.axes[0].texts]
    assert [t.get_text() for t in first.axes[0].texts] == [t.get_text() for t in second.axes[0].texts]
    monkeypatch.undo()
    png_a, _ = score_vs_cost(_crowded(), "seconds_per_round", "accuracy", out_stem=tmp_path / "a", log_x=True)
    png_b, _ = score_vs_cost(_crowded(), "seconds_per_round", "accuracy", out_stem=tmp_path / "b", log_x=True)
    assert png_a.read_bytes() == png_b.read_bytes()


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
