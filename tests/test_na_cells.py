"""N/A cells: a method that does not declare a task is neither run nor recorded, and tables
print N/A for it from the registry, beside the paper's own number where the paper has one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from benchmark import registry as R
from benchmark.report.tables import make_table
from benchmark.results import ResultStore
from benchmark.sweep import Cell, applicable, load_suite, run_suite

TASK_METRICS = {"node_cls": {"accuracy": 0.7, "macro_f1": 0.6}, "link_pred": {"auc": 0.8, "ap": 0.75}}


def _record(alg: str, task: str, seed: int, params: dict[str, Any]) -> dict[str, Any]:
    bump = 0.01 * seed + (0.05 if alg == "fedavg" else 0.0)
    return {
        "suite": "na", "scale": "tiny", "cell_id": f"{alg}-{task}-{params}", "params": params, "seed": seed,
        "status": "ok", "error": None, "config": {"task": {"name": task}, "algorithm": {"name": alg}},
        "metrics": {f"test/{m}": v + bump for m, v in TASK_METRICS[task].items()},
        "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": "2026-01-01T00:00:00",
    }


def _grid(markdown: str) -> dict[str, dict[str, str]]:
    """Markdown table -> {row label: {column header: cell text}}."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    split = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    header = split(lines[0])
    return {cells[0]: dict(zip(header, cells)) for cells in map(split, lines[2:])}


def _is_value(text: str) -> bool:
    """A rendered mean (maybe bold or underlined), not N/A, a dash or 'failed'."""
    return re.match(r"^(\*\*|<u>)?\d", text) is not None


def _cell(alg: str, task: str) -> Cell:
    return Cell("s", "tiny", {}, 0, {"algorithm": {"name": alg}, "task": {"name": task}})


def test_applicable_follows_declared_tasks():
    R.load_plugins()
    assert "link_pred" not in R.ALGORITHMS.get("fedproto").tasks  # the premise of the checks below
    assert applicable(_cell("fedavg", "link_pred"))
    assert applicable(_cell("fedproto", "node_cls"))
    assert not applicable(_cell("fedproto", "link_pred"))
    assert not applicable(_cell("fedlap", "retrieval"))  # its spectral features would identify the pair
    assert applicable(_cell("fedgcn", "link_pred"))      # its setup reads training edges only
    # an unregistered method is not silently N/A: its cell runs and fails loudly
    assert applicable(_cell("no_such_method", "link_pred"))


def test_sweep_skips_undeclared_cells_and_table_prints_na(tmp_path: Path):
    spec = {
        "name": "na_sweep", "default_scale": "tiny",
        "base": {"dataset.name": "synthetic", "dataset.num_nodes": 200, "partition.num_clients": 2,
                 "missing.rate": 0.3, "model.hidden": 8, "train.rounds": 2, "train.local_epochs": 1,
                 "train.device": "auto", "output.cache_dir": str(tmp_path / "cache")},
        "grid": {"task.name": ["node_cls", "link_pred"], "algorithm.name": ["fedavg", "fedproto"]},
        "seeds": [0],
        "table": {"rows": "algorithm.name", "columns": "task.name", "metrics": ["accuracy", "auc"],
                  "column_metrics": {"node_cls": ["accuracy"], "link_pred": ["auc"]}},
    }
    path = tmp_path / "na_sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    suite = load_suite(str(path))
    assert len(suite.cells("tiny")) == 4  # N/A cells still exist (stable ids), they are just not run
    records, ran = run_suite(suite, "tiny", results_dir=tmp_path / "results", progress=False)
    assert ran == 3
    stored = ResultStore(tmp_path / "results" / "na_sweep" / "tiny.jsonl").read()
    assert len(stored) == 3 and all(r.status == "ok" for r in stored)
    assert {(r.params["algorithm.name"], r.params["task.name"]) for r in stored} == {
        ("fedavg", "node_cls"), ("fedavg", "link_pred"), ("fedproto", "node_cls")}
    # a second sweep runs nothing: the N/A cell is not "missing"
    _, again = run_suite(suite, "tiny", results_dir=tmp_path / "results", progress=False)
    assert again == 0
    out = make_table(records, spec["table"])
    fedproto = _grid(out.markdown)["FedProto"]  # the row under its class's name (no row_labels given)
    assert _is_value(fedproto["Task=node_cls · Accuracy"])  # its node classification result
    assert fedproto["Task=link_pred · AUC"] == "N/A"
    assert "N/A: metric not applicable to this method." in out.markdown
    status = out.frame.set_index(["algorithm.name", "task.name"])["status"]
    assert status[("fedproto", "link_pred")] == "na" and status[("fedavg", "link_pred")] == "value"


def test_task_inferred_from_other_methods_of_the_column():
    """A paper column (here ``setting``) fixes the task through its config, not a param: the
    task of a cell without records is the one task the column's other records ran."""
    params = lambda alg, setting: {"algorithm.name": alg, "setting": setting}  # noqa: E731
    records = [_record("fedavg", "node_cls", s, params("fedavg", "nc")) for s in (0, 1)]
    records += [_record("fedavg", "link_pred", s, params("fedavg", "lp")) for s in (0, 1)]
    records += [_record("fedproto", "node_cls", s, params("fedproto", "nc")) for s in (0, 1)]
    spec = {
        "rows": "algorithm.name", "row_order": ["fedavg", "fedproto", "fedmystery"],
        "columns": "setting", "metrics": ["accuracy", "auc"],
        "column_metrics": {"nc": ["accuracy"], "lp": ["auc"]},
        "paper": {"fedproto": {"nc": {"accuracy": 71.5}, "lp": {"auc": 80.25}},
                  "fedavg": {"lp": {"auc": "N/A"}}},
    }
    out = make_table(records, spec)
    rows = _grid(out.markdown)
    assert list(rows["fedavg"]) == ["Algorithm", "Setting=lp · AUC", "Setting=nc · Accuracy"]
    lp = "Setting=lp · AUC"
    assert rows["fedproto"][lp] == "N/A (80.25)"     # ours: no link prediction; the paper's number still shown
    assert rows["fedavg"][lp].endswith(" (N/A)")     # the paper reports N/A
    assert _is_value(rows["fedavg"][lp])
    # an unregistered method has no result, which is not the same as not applicable
    assert rows["fedmystery"][lp] == "—" and rows["fedmystery"]["Setting=nc · Accuracy"] == "—"


def test_explicit_na_spec_still_applies():
    records = [_record(a, "node_cls", s, {"algorithm.name": a}) for a in ("fedavg", "fedproto") for s in (0, 1)]
    out = make_table(records, {"rows": "algorithm.name", "metrics": ["accuracy", "macro_f1"],
                               "na": {"fedavg": ["macro_f1"]}})
    assert _grid(out.markdown)["fedavg"]["Macro F1"] == "N/A"
    assert _is_value(_grid(out.markdown)["fedproto"]["Macro F1"])
