"""Sweeps run the finished tuning studies' choices (benchmark/tuned.py), records name the
study, and a tuned table's caption states the budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmark.errors import DataError
from benchmark.record import Record
from benchmark.report.suite_tables import make_suite_tables, tuning_note
from benchmark.sweep import check_sweep_input, load_suite, run_suite, select_cells
from benchmark.tuned import apply_choices, study_name, tuning_paths

DEMO_CELL = {"algorithm.name": "fedavg", "missing.rate": 0.0, "seed": 0}


def _write(results: Path, suite: str, scale: str, entries: dict) -> Path:
    _, path = tuning_paths(results, suite, scale)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(entries), encoding="utf-8")
    return path


def _entry(params: dict, trials: int = 4, budget: int = 4, trial: int | None = 2) -> dict:
    return {"params": params, "trials": trials, "budget": budget, "trial": trial, "value": 0.7, "pruned": 0,
            "searched": sorted(params)}


def test_a_finished_study_is_merged_into_its_cells_and_named(tmp_path):
    suite = load_suite("demo")
    cells = select_cells(suite.cells("tiny"), {"algorithm.name": "fedavg"})
    _write(tmp_path, "demo", "tiny", {
        "fedavg|missing.rate=0.0": _entry({"train.lr": 0.02, "model.hidden": 16}),
        "fedavg|missing.rate=0.3": _entry({"train.lr": 0.05}, trials=2),            # still running
        # a key the grid sets is never overridden (the record would name another setting)
        "fedavg|missing.rate=0.6": _entry({"missing.rate": 0.9, "train.lr": 0.03}),
    })
    tuned = {c.params["missing.rate"]: c for c in apply_choices(suite, cells, tmp_path) if c.seed == 0}
    done = tuned[0.0]
    assert done.config["train"]["lr"] == 0.02 and done.config["model"]["hidden"] == 16
    assert done.tuning == {"study": "fedavg|missing.rate=0.0", "trial": 2, "budget": 4, "value": 0.7,
                           "params": {"train.lr": 0.02, "model.hidden": 16}, "file": "tuning/demo/tiny.yaml"}
    assert done.cell_id in {c.cell_id for c in cells}                 # the same cell, better settings
    untouched = next(c for c in cells if c.params["missing.rate"] == 0.3 and c.seed == 0)
    assert tuned[0.3].tuning is None and tuned[0.3].config == untouched.config
    assert tuned[0.6].config["missing"]["rate"] == 0.6 and tuned[0.6].config["train"]["lr"] == 0.03


def test_a_control_cell_runs_its_settings_choice(tmp_path):
    suite = load_suite("fedmpo_table1")
    cells = select_cells(suite.cells("tiny", validate=False), {"setting": "toys", "algorithm.name": "fedavg"})
    control = [c for c in cells if c.params.get("missing.content") == "shuffle"]
    assert control and study_name(control[0], {"missing.content"}) == "fedavg|setting=toys"
    _write(tmp_path, "fedmpo_table1", "tiny", {"fedavg|setting=toys": _entry({"train.lr": 0.004})})
    assert all(c.config["train"]["lr"] == 0.004 for c in apply_choices(suite, cells, tmp_path))


def test_a_malformed_choices_file_is_one_line(tmp_path):
    _write(tmp_path, "demo", "tiny", {"fedavg|missing.rate=0.0": {"params": [1, 2]}})
    with pytest.raises(DataError, match="study 'fedavg|missing.rate=0.0' needs params"):
        apply_choices(load_suite("demo"), load_suite("demo").cells("tiny"), tmp_path)


def test_the_sweep_runs_the_choice_and_the_record_names_the_study(tmp_path):
    suite = load_suite("demo")
    _write(tmp_path, "demo", "tiny", {"fedavg|missing.rate=0.0": _entry({"train.lr": 0.02})})
    assert check_sweep_input(suite, "tiny", only=DEMO_CELL, results_dir=None)[0].config["train"]["lr"] != 0.02
    records, ran = run_suite(suite, "tiny", results_dir=tmp_path, only=DEMO_CELL, progress=False)
    assert ran == 1
    rec = next(r for r in records if r.params == {"algorithm.name": "fedavg", "missing.rate": 0.0} and r.seed == 0)
    assert rec.ok and rec.config["train"]["lr"] == 0.02
    assert rec.tuning["study"] == "fedavg|missing.rate=0.0" and rec.tuning["trial"] == 2
    assert Record.from_dict(rec.to_dict()).tuning == rec.tuning        # it survives the store
    # the stored cell is current under the choice: a second sweep runs nothing
    assert run_suite(suite, "tiny", results_dir=tmp_path, only=DEMO_CELL, progress=False)[1] == 0
    # and stale for the suite's own settings: an untuned sweep runs it again
    assert run_suite(suite, "tiny", results_dir=tmp_path, only=DEMO_CELL, progress=False, tuned=False)[1] == 1
    caption_of = lambda recs: make_suite_tables(suite, recs, "tiny")[0].output.markdown  # noqa: E731
    note = tuning_note("demo", "tiny", [rec])
    assert "4 trials" in note and "results/tuning/demo/tiny.yaml" in note and "not yet tuned" not in note
    assert note.split(" (")[0] in " ".join(caption_of([rec]).split())


def test_the_caption_names_the_methods_not_yet_tuned():
    tuned = Record(status="ok", seed=0, config={"algorithm": {"name": "fedavg"}},
                   tuning={"study": "fedavg|all", "trial": 0, "budget": 20})
    own = Record(status="ok", seed=0, config={"algorithm": {"name": "fedmpo"}})
    note = tuning_note("s", "small", [tuned, own])
    assert "20 trials" in note and note.endswith("not yet tuned (the suite's own settings): fedmpo.")
    assert tuning_note("s", "small", [own]) == ""


def test_tune_then_sweep_from_python(tmp_path):
    """``fedmm_bench.tune`` writes a choice that ``fedmm_bench.sweep`` runs (one trial: the
    suite's own setting, so the config is the suite's and only the record's stamp changes)."""
    import fedmm_bench

    only = {k: v for k, v in DEMO_CELL.items() if k != "seed"}
    chosen = fedmm_bench.tune("demo", "tiny", only=only, trials=1, results=tmp_path)
    assert list(chosen) == ["fedavg|missing.rate=0.0"] and chosen["fedavg|missing.rate=0.0"]["trials"] == 1
    records = fedmm_bench.sweep("demo", "tiny", results=tmp_path, only=DEMO_CELL)
    rec = next(r for r in records if r.tuning)
    assert rec.tuning["study"] == "fedavg|missing.rate=0.0" and rec.tuning["budget"] == 1
    assert rec.config["train"]["lr"] == load_suite("demo").cells("tiny")[0].config["train"]["lr"]


def test_a_key_another_column_sets_is_still_tuned_here(tmp_path):
    """fedmpo_table1's retrieval labels set task.temperature (the paper's 0.07), its link labels
    do not: a link study's temperature reaches the link cells, a retrieval study's never does."""
    suite = load_suite("fedmpo_table1")
    cells = [c for c in suite.cells("tiny", validate=False) if c.algorithm == "fedavg" and c.seed == 0
             and not c.params.get("missing.content")]
    _write(tmp_path, "fedmpo_table1", "tiny", {
        "fedavg|setting=dy": _entry({"task.temperature": 0.3, "train.lr": 0.002}),
        "fedavg|setting=toys": _entry({"task.temperature": 0.5, "train.lr": 0.003}),
    })
    tuned = {c.params["setting"]: c for c in apply_choices(suite, cells, tmp_path)}
    assert tuned["dy"].config["task"]["temperature"] == 0.3 and tuned["dy"].config["train"]["lr"] == 0.002
    assert tuned["toys"].config["task"]["temperature"] == 0.07 and tuned["toys"].config["train"]["lr"] == 0.003
    assert tuned["toys"].tuning["params"] == {"train.lr": 0.003}
