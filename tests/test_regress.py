"""`regress`: references with seed-variance tolerances; a broken method fails with a readable diff."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from fedmm_bench.cli import main
from benchmark.regress import (Comparison, MetricRule, RegressSpec, cell_label, compare, coverage, parse_spec,
                               provenance_drift, regress_plan, spec_for, summarize, verdict)
from benchmark.sweep import load_suite

ROOT = Path(__file__).resolve().parent.parent

SUITE = """
name: regress_test
description: a small regression suite for the tests (one method, two missing rates, three seeds)
track: node_classification
default_scale: tiny
base:
  dataset.name: synthetic
  partition.name: dirichlet_label
  partition.num_clients: 3
  missing.name: node_level
  task.name: node_cls
  model.hidden: 16
  train.rounds: 4
  train.local_epochs: 2
  train.lr: 0.01
  train.device: cpu
grid:
  algorithm.name: [fedavg]
  missing.rate: [0.0, 0.5]
seeds: [0, 1, 2]
scales:
  tiny:
    dataset.num_nodes: 300
regress:
  k: 3
  min_seeds: 3
  metrics:
    test/accuracy: {direction: higher, floor: 0.02}
    bytes_per_round: {direction: both, floor: 0}
"""


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_cell() -> Any:
    """Cells run in this process (--jobs 1); two threads on a busy 2-core box run a tiny graph
    many times slower than one."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDMM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def suite_with_reference(tmp_path_factory: pytest.TempPathFactory,
                         one_thread_per_cell: None) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("regress")
    suite = root / "regress_test.yaml"
    suite.write_text(SUITE)
    refs = root / "reference"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["regress", "--suite", str(suite), "--update", "--jobs", "1", "--reference-dir", str(refs)])
    assert rc == 0, buf.getvalue()
    return suite, refs, buf.getvalue()


def _regress(suite: Path, refs: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    rc = main(["regress", "--suite", str(suite), "--jobs", "1", "--reference-dir", str(refs), *extra])
    out, err = capsys.readouterr()
    return rc, out + err


def test_update_writes_reference_with_band_fields(suite_with_reference: tuple[Path, Path, str]) -> None:
    _, refs, out = suite_with_reference
    ref = json.loads((refs / "regress_test.json").read_text())
    assert "wrote" in out and ref["scale"] == "tiny" and ref["seeds"] == [0, 1, 2]
    assert set(ref["cells"]) == {"algorithm.name=fedavg, missing.rate=0", "algorithm.name=fedavg, missing.rate=0.5"}
    for cell in ref["cells"].values():
        acc = cell["metrics"]["test/accuracy"]
        assert acc["n"] == 3 and acc["k"] == 3 and acc["floor"] == 0.02 and acc["direction"] == "higher"
        assert cell["metrics"]["bytes_per_round"]["std"] == 0.0


def test_unchanged_code_passes(suite_with_reference: tuple[Path, Path, str],
                               capsys: pytest.CaptureFixture[str]) -> None:
    suite, refs, _ = suite_with_reference
    rc, out = _regress(suite, refs, capsys)
    assert rc == 0, out
    assert out.splitlines()[0] == "regress: OK: 4 comparisons, 0 outside tolerance"
    assert "| cell" not in out  # nothing outside tolerance: no table


def test_zero_learning_rate_is_a_regression_with_a_readable_diff(suite_with_reference: tuple[Path, Path, str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    suite, refs, _ = suite_with_reference
    rc, out = _regress(suite, refs, capsys, "--set", "train.lr=0")
    assert rc == 1, out
    header = next(line for line in out.splitlines() if line.startswith("| cell"))
    for col in ("metric", "reference", "current", "delta", "tolerance", "status"):
        assert col in header
    bad = [line for line in out.splitlines() if "| REGRESSION" in line]
    assert bad and all("test/accuracy" in line for line in bad), out
    first = out.splitlines()[0]
    assert first.startswith("regress: FAIL: 4 comparisons, ") and "REGRESSION" in first, first
    status_col = [line.split("|")[-3].strip() for line in out.splitlines() if line.startswith("| algorithm")]
    assert status_col and "ok" not in status_col  # only rows outside tolerance are listed
    assert "regress --update" in out
    # the lr is part of the protocol: said once for the suite, not on every row
    assert out.count("were made with another protocol") == 1 and "--suite" in out


def test_corrupt_reference_is_one_line_error_naming_the_file(
        suite_with_reference: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite, refs, _ = suite_with_reference
    bad = tmp_path / "refs"
    bad.mkdir()
    (bad / "regress_test.json").write_text('{"cells": {"a": ')
    rc = main(["regress", "--suite", str(suite), "--reference-dir", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "regress_test.json" in err[0] and "not a readable reference" in err[0]


def test_verdict_counts_rows_outside_tolerance() -> None:
    rows = [Comparison("a", "m", "ok"), Comparison("b", "m", "REGRESSION"), Comparison("c", "m", "improved")]
    assert verdict(rows) == "regress: FAIL: 3 comparisons, 2 outside tolerance (1 REGRESSION, 1 improved)"
    assert verdict(rows[:1]) == "regress: OK: 1 comparisons, 0 outside tolerance"
    assert verdict([rows[0], rows[2]]).startswith("regress: OK: 2 comparisons, 1 outside tolerance (1 improved)")


def test_recipe_drift_is_one_note_for_all_cells() -> None:
    ref = {"cells": {f"c{i}": {**_cell([0.5]), "artifact_recipe": "old"} for i in range(5)}}
    cur = {f"c{i}": _cell([0.5]) for i in range(5)}
    notes = provenance_drift("ci", ref, cur)
    assert len(notes) == 1 and "another artifact recipe (5 of 5 cells)" in notes[0]
    assert "regress --suite ci --update" in notes[0]
    assert provenance_drift("ci", {"cells": cur}, cur) == []


def test_missing_reference_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "regress_test.yaml"
    suite.write_text(SUITE)
    rc = main(["regress", "--suite", str(suite), "--reference-dir", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--update" in err


def test_update_refuses_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "regress_test.yaml"
    suite.write_text(SUITE)
    rc = main(["regress", "--suite", str(suite), "--update", "--set", "train.lr=0", "--reference-dir", str(tmp_path)])
    assert rc == 2 and "drop --set" in capsys.readouterr().err


def _cell(acc: list[float], nbytes: float = 100.0, failed: list[str] | None = None) -> dict[str, Any]:
    return {"params": {}, "protocol": "p", "artifact_recipe": "r", "failed": failed or [],
            "metrics": {"test/accuracy": {"mean": sum(acc) / len(acc), "std": 0.01, "n": len(acc)},
                        "bytes_per_round": {"mean": nbytes, "std": 0.0, "n": len(acc)}}}


def test_compare_statuses() -> None:
    spec = RegressSpec(k=3, min_seeds=3, scale="tiny", metrics={"test/accuracy": MetricRule("higher", 0.02),
                                                                "bytes_per_round": MetricRule("both", 0.0)})
    ref_cell = _cell([0.7, 0.7, 0.7])
    ref = {"cells": {name: {**ref_cell, "metrics": {m: {**st, "k": 3, "floor": spec.metrics[m].floor}
                                                     for m, st in ref_cell["metrics"].items()}}
                     for name in ("same", "worse", "better", "bytes", "gone", "broken")}}
    current = {"same": _cell([0.69]), "worse": _cell([0.6]), "better": _cell([0.8]), "bytes": _cell([0.7], 101.0),
               "broken": _cell([0.7], failed=["seed 1: NonFiniteLoss"]), "added": _cell([0.7])}
    got = {(c.cell, c.metric): c.status for c in compare(ref, current, spec)}
    assert got[("same", "test/accuracy")] == "ok"          # within max(3 * 0.01, 0.02)
    assert got[("worse", "test/accuracy")] == "REGRESSION"
    assert got[("better", "test/accuracy")] == "improved"  # leaving the band upwards passes
    assert got[("bytes", "bytes_per_round")] == "CHANGED"  # deterministic metric: floor 0, both ways
    assert got[("gone", "-")] == "MISSING" and got[("broken", "-")] == "FAILED" and got[("added", "-")] == "NEW"


def test_summarize_uses_ok_seeds_and_lists_failures() -> None:
    recs = [{"params": {"algorithm.name": "a"}, "seed": s, "status": "ok", "metrics": {"test/accuracy": v},
             "bytes_per_round": 10.0, "provenance": {"protocol": "p"}} for s, v in enumerate([0.5, 0.7])]
    recs.append({"params": {"algorithm.name": "a"}, "seed": 2, "status": "failed",
                 "error": {"round": 1, "reason": "boom"}})
    out = summarize(recs, ["test/accuracy", "bytes_per_round"])["algorithm.name=a"]
    assert out["metrics"]["test/accuracy"]["n"] == 2 and out["metrics"]["test/accuracy"]["mean"] == pytest.approx(0.6)
    assert out["failed"] == ["seed 2: boom"] and out["protocol"] == "p"


def test_ci_suite_reference_matches_and_covers_every_track() -> None:
    suite = load_suite("ci")
    spec = parse_spec(suite)
    assert spec.scale == "tiny" and len(suite.seeds) >= spec.min_seeds >= 3
    algos = set(suite.grid["algorithm.name"])
    assert {"local", "fedavg", "fedprox"} <= algos and len(suite.grid["missing.rate"]) >= 2
    plan = regress_plan()
    assert "ci" in plan
    for name in plan:
        member = load_suite(name)
        member_spec = spec_for(member, plan)
        assert len(member.seeds) >= member_spec.min_seeds >= 3
        ref = json.loads((ROOT / "results" / "reference" / f"{member.name}.json").read_text())
        labels = {cell_label(c.params) for c in member.cells(member_spec.scale)}
        assert set(ref["cells"]) == labels, f"results/reference/{member.name}.json is stale: run `regress --update`"
        for cell in ref["cells"].values():
            # a cell has the metrics of its own task (link prediction has AUC, retrieval MRR)
            assert set(cell["metrics"]) & set(member_spec.metrics) - {"bytes_per_round"}
            for metric, band in cell["metrics"].items():
                assert metric in member_spec.metrics
                assert band["n"] >= 3 and {"mean", "std", "k", "floor"} <= set(band)
    uncovered, _ = coverage(list(plan))
    assert uncovered == [], "a suite's track has no CI suite; give it a regress spec (ci.yaml regress.also)"
