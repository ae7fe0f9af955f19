"""One comparability rule for every report.

Records that differ only in artifact recipe or protocol hash measure different data or a
different protocol: no table, figure or leaderboard row may average them. The rule lives in
``records.comparable_groups``; tables and figures take the current group of each cell through
``select_records``, and the leaderboard shows every group as a row of its own. These tests feed
two runs of every cell that differ in one of those fields only and read the numbers back from
each report; and they check that the leaderboard's rows are exactly the groups the tables pick
from, on a store where a rule of its own would disagree (a rerun appended out of time order).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import benchmark.report.plots as plots
import benchmark.report.robustness_figure as robustness_figure
from benchmark.errors import DataError
from benchmark.record import as_records
from benchmark.report.leaderboard import build_leaderboard, group_rows
from benchmark.report.records import aggregate, comparable_groups, records_frame, select_records
from benchmark.report.tables import make_table
from benchmark.results import ResultStore

ALGS = ("fedavg", "local")
RATES = (0.0, 0.5)
OLD, NEW = 0.20, 0.80  # every cell's older run scores about OLD, its newer run about NEW
OLD_SEEDS, NEW_SEEDS = (0, 1), (1, 2)  # seed 1 is in both runs: a seed never crosses runs either
OLD_TS, NEW_TS = "2024-01-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00"
FIELDS = ("artifact_recipe", "protocol")


def _record(alg: str, rate: float, seed: int, acc: float, *, recipe: str = "recipe-1", protocol: str = "proto-1",
            ts: str = NEW_TS, status: str = "ok", tag: str = "") -> dict[str, Any]:
    ok = status == "ok"
    return {
        "suite": "cmp", "scale": "tiny", "cell_id": f"{alg}-{rate}", "seed": seed, "status": status,
        "params": {"algorithm.name": alg, "missing.rate": rate},
        "error": None if ok else {"round": 1, "reason": "NaN loss"},
        "metrics": {"test/accuracy": acc, "val/accuracy": acc} if ok else {},
        "per_client": {"test/accuracy": [acc, acc]} if ok else {},
        "curves": {"round": [0, 1], "val/accuracy": [acc, acc]},
        "config": {"task": {"name": "node_cls"}},
        "provenance": {"artifact_hash": f"{recipe}-{seed}", "artifact_recipe": recipe, "protocol": protocol,
                       "git_sha": "0123456789ab", "git_dirty": False, "config_hash": tag or "c"},
        "timestamp": ts,
    }


def _score(base: float, seed: int) -> float:
    return base + 0.01 * seed


def _two_runs(field: str, newer_first: bool) -> list[dict[str, Any]]:
    """Every cell run twice, the runs differing only in ``field`` (and their seeds' scores)."""
    runs = []
    for base, seeds, ts, value in ((OLD, OLD_SEEDS, OLD_TS, "old"), (NEW, NEW_SEEDS, NEW_TS, "new")):
        which = {"recipe": f"recipe-{value}"} if field == "artifact_recipe" else {"protocol": f"proto-{value}"}
        runs.append([_record(a, r, s, _score(base, s), ts=ts, **which) for a in ALGS for r in RATES for s in seeds])
    old, new = runs
    return new + old if newer_first else old + new


NEW_MEAN = statistics.fmean(_score(NEW, s) for s in NEW_SEEDS)
OLD_MEAN = statistics.fmean(_score(OLD, s) for s in OLD_SEEDS)
CASES = [pytest.param(f, first, id=f"{f}-{'newer' if first else 'older'}-appended-first")
         for f in FIELDS for first in (False, True)]


@pytest.mark.parametrize(("field", "newer_first"), CASES)
def test_tables_never_average_two_runs(field: str, newer_first: bool) -> None:
    spec = {"rows": "algorithm.name", "columns": "missing.rate", "metrics": ["accuracy"]}
    out = make_table(_two_runs(field, newer_first), spec)
    cells = out.frame[out.frame["metric"] == "accuracy"]
    assert len(cells) == len(ALGS) * len(RATES)
    assert cells["mean"].tolist() == pytest.approx([100 * NEW_MEAN] * len(cells))
    assert (cells["n"] == len(NEW_SEEDS)).all()
    assert "excluded" in out.markdown


@pytest.mark.parametrize(("field", "newer_first"), CASES)
def test_figures_never_average_two_runs(field: str, newer_first: bool, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    records = _two_runs(field, newer_first)
    drawn: list[np.ndarray] = []  # what each figure plots, read back instead of saved

    def capture(fig: Any, stem: Any) -> list[Path]:
        ax = fig.axes[0]
        drawn.extend(np.asarray(line.get_ydata(), dtype=float) for line in ax.lines)
        drawn.extend(np.ma.filled(np.asarray(im.get_array(), dtype=float), np.nan) for im in ax.images)
        return []

    monkeypatch.setattr(plots, "_save", capture)
    monkeypatch.setattr(robustness_figure, "_save", capture)
    plots.robustness_plot(records, "missing.rate", "accuracy", out_stem=tmp_path / "r")
    plots.round_curve_plot(records, "val/accuracy", out_stem=tmp_path / "c", filters={"missing.rate": 0.5})
    plots.heatmap_plot(records, "missing.rate", "algorithm.name", "accuracy", out_stem=tmp_path / "h")
    assert len(drawn) == 2 * len(ALGS) + 1  # a line per method in two figures, one heatmap
    for values in drawn:
        assert values.ravel() == pytest.approx(np.full(values.size, 100 * NEW_MEAN))
    auc = robustness_figure.robustness_auc(records, "missing.rate", "accuracy")
    assert list(auc.values()) == pytest.approx([100 * NEW_MEAN] * len(ALGS))


@pytest.mark.parametrize(("field", "newer_first"), CASES)
def test_leaderboard_never_averages_two_runs(field: str, newer_first: bool, tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results" / "cmp" / "tiny.jsonl")
    for rec in _two_runs(field, newer_first):
        store.append(rec)
    (section,) = build_leaderboard(tmp_path / "results", tmp_path / "tables", plots=False).sections
    assert len(section.rows) == 2 * len(ALGS) * len(RATES)
    for row in section.rows:
        runs = {((r.provenance["artifact_recipe"]), r.provenance["protocol"]) for r in row.records}
        assert len(runs) == 1, runs
        stat = row.stats["test/accuracy"]
        assert (stat.mean, stat.n) == (pytest.approx(NEW_MEAN if row.current else OLD_MEAN), 2)
        # the robustness AUC joins current rows only: a flat curve at the newer run's mean
        assert row.auc == pytest.approx(NEW_MEAN) if row.current else math.isnan(row.auc)
    assert sum(r.current for r in section.rows) == len(ALGS) * len(RATES)


def test_aggregate_refuses_a_cell_that_mixes_two_runs() -> None:
    frame = records_frame(_two_runs("protocol", newer_first=False))
    keys = ["algorithm.name", "missing.rate"]
    with pytest.raises(DataError, match=r"mixes 2 \(artifact recipe, protocol\) runs; select_records"):
        aggregate(frame, keys, ["test/accuracy"])
    selected, exclusions = select_records(frame, keys)
    assert aggregate(selected, keys, ["test/accuracy"])["n"].tolist() == [2] * 4
    assert [e.n_excluded for e in exclusions] == [2] * 4 and all("older protocol" in e.reason for e in exclusions)


def _messy_store() -> list[dict[str, Any]]:
    """Reruns, failures, three runs of one cell and a seed rerun appended before the record it
    replaces (a store merged from two machines): the cases where two rules could part ways."""
    recs = [
        _record("fedavg", 0.0, 0, 0.50, tag="a"),
        _record("fedavg", 0.0, 1, 0.0, status="failed", ts="2025-01-02T00:00:00+00:00", tag="b"),
        _record("fedavg", 0.0, 1, 0.60, ts="2025-01-03T00:00:00+00:00", tag="c"),  # the retry wins
        _record("fedavg", 0.0, 0, 0.90, recipe="recipe-0", ts="2024-01-01T00:00:00+00:00", tag="d"),
        _record("fedavg", 0.0, 0, 0.10, protocol="proto-0", ts="2023-01-01T00:00:00+00:00", tag="e"),
        # appended first but newer: replaces seed 0 of local@0.5 although the store has it later
        _record("local", 0.5, 0, 0.45, ts="2025-02-01T00:00:00+00:00", tag="f"),
        _record("local", 0.5, 0, 0.30, ts="2025-01-01T00:00:00+00:00", tag="g"),
        _record("local", 0.5, 1, 0.35, tag="h"),
        # a cell whose older run was appended last
        _record("local", 0.0, 0, 0.70, recipe="recipe-9", tag="i"),
        _record("local", 0.0, 0, 0.20, ts="2024-06-01T00:00:00+00:00", tag="j"),
    ]
    return recs


def _tags(records: list[Any]) -> set[str]:
    return {r.provenance["config_hash"] for r in as_records(records)}


def test_leaderboard_rows_are_the_groups_tables_pick_from() -> None:
    recs = _messy_store()
    frame = records_frame(recs)
    keys = frame.attrs["param_keys"]
    selected, _ = select_records(frame, keys)
    rows = group_rows("cmp", "tiny", recs)
    groups = comparable_groups(frame, keys)
    assert [(_tags(r.records), r.current, r.recipe, r.protocol) for r in rows] == \
        [(_tags([recs[i] for i in g.index]), g.current, g.recipe, g.protocol) for g in groups]
    current = set().union(*(_tags(r.records) for r in rows if r.current))
    assert current == _tags([recs[i] for i in selected.index]) == {"a", "c", "f", "h", "i"}
    superseded = [_tags(r.records) for r in rows if not r.current]
    assert superseded == [{"d"}, {"e"}, {"j"}]


def test_comparable_groups_orders_and_counts() -> None:
    recs = _messy_store()
    frame = records_frame(recs)
    groups = comparable_groups(frame, ["algorithm.name", "missing.rate"])
    # groups in the order their first record was appended; cells numbered the same way
    assert [(g.cell, g.cell_id, g.current, g.n_records, len(g.index)) for g in groups] == [
        (("fedavg", 0.0), 0, True, 3, 2),
        (("fedavg", 0.0), 0, False, 1, 1),
        (("fedavg", 0.0), 0, False, 1, 1),
        (("local", 0.5), 1, True, 3, 2),
        (("local", 0.0), 2, True, 1, 1),
        (("local", 0.0), 2, False, 1, 1),
    ]
    with pytest.raises(DataError, match="lack the column"):
        comparable_groups(frame.drop(columns=["protocol"]), ["algorithm.name"])


def test_missing_or_unparseable_timestamps_sort_first_without_a_pandas_warning():
    import warnings

    import pandas as pd

    from benchmark.report.records import _timestamps

    frame = pd.DataFrame({"timestamp": ["2026-01-01T00:00:00+00:00", None, "junk"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = _timestamps(frame)
    assert ts.iloc[1] == ts.iloc[2] < ts.iloc[0]
