"""Reference rows in tables whose rows are a method option (sensitivity grids, ablations):
placed under their own names, repeated across the option columns they do not carry, N/A where
the reference does not declare the column's task, and named in a heatmap's note."""

from __future__ import annotations

import pytest

from benchmark.record import Record
from benchmark.registry import ALGORITHMS, load_plugins
from benchmark.report.plots import heatmap_plot
from benchmark.report.reference_rows import place_references, reference_means, reference_name, reference_note
from benchmark.report.tables import make_table


def _rec(params: dict, score: float, seed: int = 0, task: str = "node_cls") -> Record:
    return Record.from_dict({
        "suite": "s", "scale": "small", "cell_id": "|".join(f"{k}={v}" for k, v in sorted(params.items())),
        "params": params, "seed": seed, "status": "ok", "error": None,
        "metrics": {"test/accuracy": score, "test/auc": score},
        "config": {"task": {"name": task}}, "algorithm": {"name": params.get("algorithm.name", "m")},
        "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": "2026-01-01T00:00:00",
    })


def _grid() -> list[Record]:
    out = []
    for seed in (0, 1):
        for rec in (0.1, 1.0):
            for proto in (0.5, 2.0):
                out.append(_rec({"setting": "a", "algorithm.lambda_rec": rec, "algorithm.lambda_proto": proto},
                                0.6 + rec / 10 + proto / 100 + seed / 1000, seed))
        out.append(_rec({"setting": "a", "algorithm.name": "chance"}, 0.25, seed))
        out.append(_rec({"setting": "a", "algorithm.name": "linear"}, 0.70 + seed / 100, seed))
        out.append(_rec({"setting": "b", "algorithm.name": "linear"}, 0.10, seed))  # another setting
    return out


def test_references_are_placed_under_their_name_in_every_option_column():
    placed = place_references(_grid(), ["algorithm.lambda_rec"], ["algorithm.lambda_proto"], {"setting": "a"})
    refs = [r for r in placed if reference_name(r)]
    # chance and linear of setting a, two seeds, repeated under both lambda_proto values;
    # setting b's linear row is filtered out
    assert len(refs) == 2 * 2 * 2
    assert {(r.params["algorithm.lambda_rec"], r.params["algorithm.lambda_proto"]) for r in refs} == {
        ("chance", 0.5), ("chance", 2.0), ("linear", 0.5), ("linear", 2.0)}
    assert all(r.params["setting"] == "a" for r in refs)


def test_a_table_of_methods_is_left_alone():
    records = _grid()
    assert place_references(records, ["algorithm.name"], ["setting"]) == records
    assert place_references(records, ["setting", "algorithm.lambda_rec"], []) == records


def test_sensitivity_table_prints_reference_rows_last_unranked_and_the_same_in_each_column():
    spec = {"rows": "algorithm.lambda_rec", "columns": "algorithm.lambda_proto", "filters": {"setting": "a"},
            "metrics": ["accuracy"]}
    md = make_table(_grid(), spec).markdown
    lines = [line for line in md.splitlines() if line.startswith("|")][2:]
    labels = [line.split("|")[1].strip() for line in lines]
    assert labels == ["0.1", "1", "Chance (reference)", "Linear (reference)"]
    linear = [c.strip() for c in lines[3].strip().strip("|").split("|")][1:]
    assert linear == ["70.50 ± 0.71", "70.50 ± 0.71"]  # no bold: reference rows are never ranked
    assert "**" in lines[1] and "**" not in lines[2] + lines[3]


def test_reference_that_does_not_declare_the_task_prints_na(monkeypatch):
    load_plugins()
    monkeypatch.setattr(ALGORITHMS.get("linear"), "tasks", ("node_cls", "retrieval", "matching"))
    records = [_rec({"setting": "dy", "variant": v}, 0.6 + i / 10, task="link_pred") for i, v in enumerate(("full", "wo"))]
    records += [_rec({"setting": "dy", "algorithm.name": "linear"}, 0.5, task="link_pred"),
                _rec({"setting": "dy", "algorithm.name": "chance"}, 0.5, task="link_pred")]
    md = make_table(records, {"rows": "variant", "columns": "setting", "metrics": ["auc"]}).markdown
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in md.splitlines()
            if line.startswith("|")}
    assert rows["Linear (reference)"] == "N/A"  # a reference that fits no link predictor
    assert rows["Chance (reference)"].startswith("50.00")


def test_heatmap_leaves_references_out_of_the_grid_and_names_them(tmp_path):
    means = reference_means(_grid(), "test/accuracy", {"setting": "a"})
    assert means == pytest.approx({"chance": 0.25, "linear": 0.705})
    assert reference_note(means) == "Chance 25.0 · Linear 70.5" and reference_note({}) == ""
    paths = heatmap_plot(_grid(), "algorithm.lambda_proto", "algorithm.lambda_rec", "accuracy",
                         out_stem=tmp_path / "h", filters={"setting": "a"})
    assert all(p.is_file() for p in paths)
