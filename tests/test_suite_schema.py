"""Suite files: every key's type, the names that become paths, the grid's size and ``--only``
selections are checked when the suite loads, each failure one ConfigError line (exit 2 from
the CLI) before any cell runs; every shipped suite still loads; fuzzed suites load or are
refused with one line, never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedmm_bench.cli import main
from benchmark.errors import BenchmarkError, ConfigError
from benchmark.sweep import MAX_CELLS, SCALES, SUITE_KEYS, SUITES_DIR, load_suite, select_cells

BASE = {"dataset.name": "synthetic", "dataset.num_nodes": 60, "partition.num_clients": 2, "model.hidden": 8,
        "train.rounds": 1, "train.local_epochs": 1, "train.device": "cpu"}
GOOD = {"name": "mini", "default_scale": "tiny", "base": BASE,
        "grid": {"algorithm.name": ["local", "fedavg"], "missing.rate": [0.0, 0.5]}, "seeds": [0, 1]}


def write(tmp: Path, spec: dict[str, Any] | str, name: str = "mini.yaml") -> Path:
    path = tmp / name
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
    return path


def sweep_error(capsys: Any, args: list[str]) -> str:
    """``sweep``: exit 2, one stderr line, which is returned."""
    assert main(["sweep", *args]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# --------------------------------------------------------------------------- the shipped suites


@pytest.mark.parametrize("path", sorted(SUITES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_suite_loads(path: Path):
    suite = load_suite(path.stem)
    assert suite.name == path.stem
    assert 0 < len(suite.cells(suite.default_scale, validate=False)) <= MAX_CELLS


# --------------------------------------------------------------------------- the probes


BAD = [
    ({"name": 5}, "'name' must be a string, got 5"),
    ({"scales": {"tiny": 5}}, "scales.tiny must be a mapping of config overrides, got 5"),
    ({"base": [1, 2]}, "'base' must be a mapping, got [1, 2]"),
    ({"table": 5}, "'table' must be a mapping, got 5"),
    ({"name": "../../outside"}, "'name' must be an identifier"),
    ({"name": "a/b"}, "'name' must be an identifier"),
    ({"name": ""}, "'name' must be an identifier"),
    ({"scales": {"huge": {}}}, "unknown scale 'huge'"),
    ({"default_scale": "big"}, "'default_scale' must be one of tiny, small, paper"),
    ({"seeds": [True]}, "'seeds' must be a list"),
    ({"seeds": []}, "'seeds' must be a list"),
    ({"seeds": [-1]}, "'seeds' must be a list"),
    ({"seeds": 3}, "'seeds' must be a list"),
    ({"isolate": "yes"}, "'isolate' must be true or false"),
    ({"grid": 5}, "'grid' must be a mapping or a list"),
    ({"grid": {5: [1]}}, "grid key 5 must be a string"),
    ({"grid": {"algorithm.name": "fedavg"}}, "'grid' must map dotted config keys to non-empty lists"),
    ({"grid": {f"model.k{i}": [1, 2] for i in range(16)}}, "more than 20000"),
    ({"grid": {"dataset.extra": [{1: 2}]}}, "config keys must be strings"),
    ({"base": {1: 2}}, "base: config keys must be strings"),
    ({"tables": [5]}, "tables[0] must be a mapping"),
    ({"tables": [{"stem": "../x"}]}, "tables[0].stem must be an identifier"),
    ({"table": {}, "tables": [{}]}, "not both"),
    ({"plots": [{"name": "../../x"}]}, "plots[0].name must be an identifier"),
    ({"plots": {"name": "x"}}, "'plots' must be a list"),
    ({"axes": {"my axis": {"a": {}}}}, "an axis name must be an identifier"),
    ({"axes": {"../x": {"a": {}}}}, "must not contain a dot"),
    ({"axes": {"setting": {"a": {1: 2}}}}, "config keys must be strings"),
    ({"resources": [1]}, "'resources' must be a mapping"),
    ({"control": {"where": {"nope": 1}}}, "control key 'nope' is not a grid key"),
    ({"description": ["x"]}, "'description' must be a string"),
    ({"bogus": 1}, "unknown suite key 'bogus'"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_suite_is_one_line(change: dict[str, Any], message: str, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, {**GOOD, **change})
    with pytest.raises(ConfigError) as e:
        load_suite(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert message in sweep_error(capsys, [str(path), "--results", str(tmp_path / "results")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mini.yaml"], "a refused suite writes nothing"


def test_duplicate_grid_key_is_refused(tmp_path: Path, capsys):
    path = write(tmp_path, "name: mini\ngrid:\n  algorithm.name: [local]\n  missing.rate: [0.0]\n"
                           "  algorithm.name: [fedavg]\n")
    line = sweep_error(capsys, [str(path), "--results", str(tmp_path / "results")])
    assert "duplicate key 'algorithm.name'" in line and "line 5" in line and "first at line 3" in line


def test_an_unnamed_suite_takes_its_file_name_which_must_be_an_identifier(tmp_path: Path):
    spec = {k: v for k, v in GOOD.items() if k != "name"}
    assert load_suite(str(write(tmp_path, spec, "plain_name.yaml"))).name == "plain_name"
    with pytest.raises(ConfigError, match="the file name"):
        load_suite(str(write(tmp_path, spec, "has-dash.yaml")))


def test_a_name_is_never_a_path_into_the_suites_folder(capsys):
    assert "unknown suite" in sweep_error(capsys, ["../suites/ci"])
    assert "unknown suite" in sweep_error(capsys, ["x" * 5000])


def test_a_key_without_a_value_counts_as_absent(tmp_path: Path):
    suite = load_suite(str(write(tmp_path, {**GOOD, "table": None, "plots": None, "axes": None})))
    assert "table" not in suite.spec and len(suite.cells("tiny")) == 8


# --------------------------------------------------------------------------- --only


def test_only_that_matches_nothing_names_the_value(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, GOOD)
    results = str(tmp_path / "results")
    line = sweep_error(capsys, [str(path), "--results", results, "--only", "algorithm.name=fedprox"])
    assert "--only algorithm.name=fedprox matches no cell" in line and "local, fedavg" in line
    line = sweep_error(capsys, [str(path), "--results", results, "--only", "seed=7"])
    assert "--only seed=7 matches no cell" in line and "0, 1" in line
    assert not list(tmp_path.rglob("*.jsonl")), "no cell runs, no record is written"


def test_only_values_that_match_apart_but_not_together(tmp_path: Path):
    suite = load_suite(str(write(tmp_path, {**GOOD, "grid": [{"algorithm.name": ["local"], "missing.rate": [0.0]},
                                                              {"algorithm.name": ["fedavg"], "missing.rate": [0.5]}]})))
    cells = suite.cells("tiny")
    assert len(select_cells(cells, {"algorithm.name": "local"})) == 2
    assert select_cells(cells, {}) == cells
    with pytest.raises(ConfigError, match="each matches some cell, but no cell has all of them"):
        select_cells(cells, {"algorithm.name": "local", "missing.rate": 0.5})


# --------------------------------------------------------------------------- fuzzing

FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=700,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-3, max_value=2**40),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from([*SCALES, "fedavg", "local", "algorithm.name", "missing.rate", "a.b", "../x",
                                     "stem", "name", "where", "kind", "robustness"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(scalars, inner, max_size=3)), max_leaves=5)
grids = st.dictionaries(st.sampled_from(["algorithm.name", "missing.rate", "setting", "seed", "model.hidden", "x"]),
                        st.lists(st.sampled_from(["local", "fedavg", 0.0, 0.5, "a", 8, 1]), max_size=3), max_size=3)


@st.composite
def suites(draw: Any) -> dict[Any, Any]:
    """A suite mapping: real keys with plausible or wrong values, sometimes an unknown key."""
    spec: dict[Any, Any] = {}
    for key in draw(st.lists(st.sampled_from(SUITE_KEYS), max_size=6, unique=True)):
        if key == "grid":
            spec[key] = draw(st.one_of(grids, st.lists(grids, max_size=2), values))
        elif key == "base":
            spec[key] = draw(st.one_of(st.just(BASE), st.dictionaries(st.sampled_from(list(BASE)), scalars), values))
        elif key == "axes":
            spec[key] = draw(st.one_of(st.just({"setting": {"a": {"model.hidden": 8}, "b": {"tiny": {}}}}), values))
        elif key == "control":
            spec[key] = draw(st.one_of(st.just({"where": {"algorithm.name": "local"}, "label": "c"}), values))
        else:
            spec[key] = draw(values)
    if draw(st.integers(0, 9)) == 0:
        spec[draw(scalars)] = draw(values)
    return spec


@settings(FUZZ)
@given(spec=suites())
def test_fuzz_suite_files(spec: dict[Any, Any]):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz_suite.yaml"
        path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False))
        try:
            suite = load_suite(str(path))
            event("loaded")
            cells = suite.cells(suite.default_scale)
            event("cells built")
            select_cells(cells, {"seed": 0})
        except BenchmarkError as e:
            assert str(e) and "\n" not in str(e) and len(str(e)) < 2000, repr(str(e))[:300]
