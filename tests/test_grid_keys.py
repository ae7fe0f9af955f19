"""A record's grid values (``params``) always describe the config that ran.

``sweep SUITE --set algorithm.name=X`` once ran X in every cell and stored each record under
its grid name, so the table printed X's numbers as "Chance (reference)" and every other row.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.errors import ConfigError
from benchmark.grid_keys import grid_config_keys, params_disagreements, refuse_grid_overrides
from benchmark.record import latest_records
from benchmark.results import ResultStore
from benchmark.sweep import SUITES_DIR, check_sweep_input, load_suite

ROOT = Path(__file__).resolve().parent.parent
STORES = sorted((ROOT / "results").glob("*/*.jsonl"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("key", ["algorithm.name=fedprox", "algorithm={name: fedprox}", "missing.rate=0.1",
                                 "missing={rate: 0.1}"])
def test_set_on_a_grid_axis_exits_2_with_one_line(tmp_path: Path, key: str) -> None:
    done = _cli("sweep", "demo", "--scale", "tiny", "--set", key, "--only", "algorithm.name=fedavg",
                "--results", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "grid axis" in lines[0] and "--with-method" in lines[0] and "--only" in lines[0]
    assert not any(tmp_path.iterdir())  # nothing ran, nothing was written


def test_set_on_a_key_a_named_axis_sets_is_refused() -> None:
    suite = load_suite("fedmpo_table1")  # its 'setting' labels set dataset.name, task.name, ...
    assert grid_config_keys(suite)["dataset.name"] == "setting"
    with pytest.raises(ConfigError, match="set by the grid axis 'setting'"):
        refuse_grid_overrides(suite, {"dataset.name": "synthetic"})


def test_set_off_the_grid_still_applies_and_keeps_params_true() -> None:
    suite = load_suite("demo")
    cells = check_sweep_input(suite, "tiny", {"train.rounds": 2}, {"algorithm.name": "fedavg"})
    assert cells and all(c.config["train"]["rounds"] == 2 for c in cells)
    assert all(c.params["algorithm.name"] == "fedavg" == c.config["algorithm"]["name"] for c in cells)


def test_a_cell_whose_params_disagree_with_its_config_is_refused() -> None:
    suite = load_suite("demo")
    cell = suite.cells("tiny")[0]
    cell.config["algorithm"]["name"] = "chance" if cell.params["algorithm.name"] != "chance" else "fedavg"
    wrong = params_disagreements(suite, cell.params, cell.config, "tiny")
    assert wrong and wrong[0].startswith("algorithm.name=")
    axis = load_suite("fedmpo_table1")
    c = axis.cells("tiny")[0]
    c.config["dataset"]["name"] = "tiktok"
    assert any("dataset.name" in w for w in params_disagreements(axis, c.params, c.config, "tiny"))


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_committed_record_is_labelled_by_what_ran(store: Path) -> None:
    """Every current record's grid values equal its config (named axes: the label's overrides at
    the record's scale under today's suite); an older record may predate a change of an axis
    label (it is superseded in every report), but its dotted grid keys must still agree."""
    name = store.parent.name
    if not (SUITES_DIR / f"{name}.yaml").is_file():
        pytest.skip(f"{name} has no suite")
    suite = load_suite(name)
    records = [r for r in ResultStore(store).read() if r.config]
    assert records
    latest = {id(r) for r in latest_records(records)}
    wrong = []
    for r in records:
        params = r.params if id(r) in latest else {k: v for k, v in r.params.items() if k not in suite.axes}
        wrong += [f"{r.cell_id} seed {r.seed}: {w}" for w in params_disagreements(suite, params, r.config,
                                                                                  r.scale or store.stem)]
    assert not wrong, wrong[:5]
