"""Sensitivity heatmaps (report/plots.py ``heatmap_plot``): an axis along which nothing changes
(a weight the method switches off for the task, as lambda_proto on KU matching) is dropped, the
grid drawn as a strip, and the title says so; an axis that changes anything is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import benchmark.report.plots as plots

ROWS, COLS = (0.1, 0.5, 1.0, 2.0), (0.1, 0.5, 1.0)


def _grid(score: Any, failed: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """Three seeds per (lambda_rec, lambda_proto) point scoring ``score(rec, proto, seed)``; the
    point ``failed`` has only failed seeds."""
    out = []
    for rec in ROWS:
        for proto in COLS:
            for seed in range(3):
                bad = (rec, proto) == failed
                out.append({"params": {"algorithm.lambda_rec": rec, "algorithm.lambda_proto": proto}, "seed": seed,
                            "status": "failed" if bad else "ok",
                            "error": {"round": 2, "reason": "NaN"} if bad else None,
                            "metrics": {} if bad else {"test/auc": score(rec, proto, seed)},
                            "provenance": {"artifact_recipe": "r", "protocol": "p"},
                            "timestamp": "2026-01-01T00:00:00"})
    return out


def _draw(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, records: list[dict[str, Any]]) -> Any:
    figures: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda fig, stem: figures.append(fig) or [])
    plots.heatmap_plot(records, "algorithm.lambda_proto", "algorithm.lambda_rec", "auc", out_stem=tmp_path / "h",
                       x_label="λ_proto", y_label="λ_rec", title="matching AUC")
    (ax,) = [a for a in figures[0].axes if a.images]
    return ax


def test_identical_columns_drop_the_column_axis_and_the_title_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path):
    ax = _draw(monkeypatch, tmp_path, _grid(lambda rec, proto, seed: 0.6 - rec / 10 + seed / 100))
    grid = np.asarray(ax.images[0].get_array())
    assert grid.shape == (len(ROWS), 1)  # a strip: one column for every lambda_proto
    assert grid[:, 0] == pytest.approx([100 * (0.61 - r / 10) for r in ROWS])
    assert list(ax.get_xticks()) == [] and [t.get_text() for t in ax.get_yticklabels()] == ["0.1", "0.5", "1", "2"]
    assert ax.get_ylabel() == "λ_rec"
    title = ax.get_title()
    assert title.startswith("matching AUC\n") and "λ_proto axis dropped: 0.1, 0.5, 1 give identical results" in title
    assert len([t for t in ax.texts if "±" in t.get_text()]) == len(ROWS)  # a number per row, not per grid point


def test_identical_rows_drop_the_row_axis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    ax = _draw(monkeypatch, tmp_path, _grid(lambda rec, proto, seed: 0.5 + proto / 10 + seed / 100))
    assert np.asarray(ax.images[0].get_array()).shape == (1, len(COLS))
    assert list(ax.get_yticks()) == [] and ax.get_ylabel() == ""
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "0.5", "1"]
    assert "λ_rec axis dropped: 0.1, 0.5, 1, 2 give identical results" in ax.get_title()


def test_an_axis_that_changes_anything_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # every column the same but for one grid point (a different score, then a failure)
    nudged = _draw(monkeypatch, tmp_path,
                   _grid(lambda rec, proto, seed: 0.6 - rec / 10 + 0.01 * ((rec, proto) == (1.0, 0.5))))
    failed = _draw(monkeypatch, tmp_path, _grid(lambda rec, proto, seed: 0.6 - rec / 10, failed=(2.0, 1.0)))
    varied = _draw(monkeypatch, tmp_path, _grid(lambda rec, proto, seed: 0.5 + proto / 10 - rec / 10))
    for ax in (nudged, failed, varied):
        assert np.asarray(ax.images[0].get_array()).shape == (len(ROWS), len(COLS))
        assert "dropped" not in ax.get_title() and len(ax.get_xticks()) == len(COLS)
