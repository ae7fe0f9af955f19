"""The Python API (``fedmm_bench``) and the typed record (``benchmark.record.Record``).

The README's Python example is executed as written; a record round-trips through JSON
without loss; the engine, the sweep's stamp and a failed cell all write the same schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import fedmm_bench
from benchmark.errors import ConfigError, DataError
from benchmark.record import SCHEMA_VERSION, Record, failed_record
from benchmark.results import ResultStore, record_problem

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(dataset__num_nodes=200, partition__num_clients=3, train__rounds=3, model__hidden=16)


def _readme_python_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "README.md has no ```python example"
    return blocks[0]


def test_readme_python_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's first Python block, run from a folder whose results/demo/small.jsonl holds
    the repository's demo store (load_results reads the working directory's results/)."""
    (tmp_path / "results" / "demo").mkdir(parents=True)
    (tmp_path / "results" / "demo" / "small.jsonl").write_bytes((ROOT / "results/demo/small.jsonl").read_bytes())
    monkeypatch.chdir(tmp_path)
    code = _readme_python_block()
    assert "from fedmm_bench import" in code
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the repository's own example
    out = capsys.readouterr().out
    assert out.strip(), "the example prints its results"


def test_run_returns_a_typed_record_with_overrides():
    rec = fedmm_bench.run("demo", algorithm__name="fedavg", **TINY)
    assert isinstance(rec, Record) and rec.ok
    assert rec.config["train"]["rounds"] == 3 and rec.config["algorithm"]["name"] == "fedavg"
    assert rec.rounds_run == 3 and len(rec.curves["round"]) == 3
    assert set(rec.test) >= {"accuracy"} and rec.test["accuracy"] == rec.metrics["test/accuracy"]
    assert rec.val["accuracy"] == rec.metrics["val/accuracy"]
    assert rec.guard and "converged" in rec.guard
    assert rec.schema_version == SCHEMA_VERSION
    same = fedmm_bench.run({"dataset.name": "synthetic", "task.name": "node_cls", "partition.name": "dirichlet_label",
                            "missing.name": "node_level", "algorithm.name": "fedavg",
                            "split": {"train": 0.2, "val": 0.2, "test": 0.6}, "model.hidden": 16,
                            "train.lr": 0.01, "train.local_epochs": 3, "partition.alpha": 0.5},
                           **{k: v for k, v in TINY.items()})
    assert same.metrics == rec.metrics  # a dict config = the suite's base config it spells out


def test_run_rejects_what_it_cannot_read(tmp_path):
    with pytest.raises(ConfigError, match="suite"):
        fedmm_bench.run("no_such_suite")
    with pytest.raises(ConfigError, match="not found"):
        fedmm_bench.run(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="RunConfig"):
        fedmm_bench.run(3.5)
    with pytest.raises(ConfigError):
        fedmm_bench.run("demo", train__no_such_key=1, **TINY)


def test_sweep_and_load_results(tmp_path):
    only = {"algorithm.name": "fedavg", "missing.rate": 0.0, "seed": 0}
    recs = fedmm_bench.sweep("demo", scale="tiny", results=tmp_path, only=only)
    ran = [r for r in recs if r.params.get("algorithm.name") == "fedavg"]
    assert ran and all(isinstance(r, Record) and r.suite == "demo" and r.cell_id for r in ran)
    again = fedmm_bench.sweep("demo", scale="tiny", results=tmp_path, only=only)  # stored: skipped
    assert [r.timestamp for r in again] == [r.timestamp for r in recs]
    frame = fedmm_bench.load_results("demo", scale="tiny", results=tmp_path)
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(recs)
    assert frame.loc[frame["algorithm.name"] == "fedavg", "test/accuracy"].iloc[0] == ran[0].test["accuracy"]
    with pytest.raises(DataError, match="no records"):
        fedmm_bench.load_results("demo", scale="paper", results=tmp_path)


def test_record_round_trips_and_keeps_unknown_fields():
    line = json.loads((ROOT / "results/demo/small.jsonl").read_text().splitlines()[-1])
    rec = Record.from_dict(line)
    back = rec.to_dict()
    assert back.pop("schema_version") == SCHEMA_VERSION
    line.pop("schema_version", None)
    assert back == line                                   # nothing lost, nothing invented
    newer = {**line, "a_future_field": {"x": 1}}
    assert Record.from_dict(newer).to_dict()["a_future_field"] == {"x": 1}
    with pytest.raises(ValueError, match="newer"):
        Record.from_dict({**line, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(ValueError, match="status"):
        Record(status="maybe", seed=0)
    assert Record.from_dict({"status": "ok", "seed": 1, "metrics": {"test/mrr": 0.3, "test_server/mrr": 0.2}}
                            ).split("test_server") == {"mrr": 0.2}


def test_engine_sweep_and_failed_cells_write_one_schema(tmp_path):
    """Every writer goes through Record: the store accepts each line and reads it back."""
    rec = fedmm_bench.run("demo", algorithm__name="local", **TINY).to_dict()
    failed = failed_record(seed=2, reason="boom", rnd=1, timestamp="t").to_dict()
    store = ResultStore(tmp_path / "s.jsonl")
    for r in (rec, failed):
        assert record_problem(r) is None and r["schema_version"] == SCHEMA_VERSION
        store.append(r)
    back = store.read()
    assert [r.status for r in back] == ["ok", "failed"]
    assert back[1].error == {"round": 1, "reason": "boom"}
    assert record_problem({**rec, "schema_version": SCHEMA_VERSION + 1}) is not None


def test_python_api_page_reading_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """docs/python-api.md's last block reads a store as Records and tables them; every record
    the harness reads is a Record (ResultStore.read), and the table sees the store's methods."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs/python-api.md").read_text(), flags=re.S)
    code = blocks[-1]
    assert "ResultStore" in code and "make_table" in code
    (tmp_path / "results" / "demo").mkdir(parents=True)
    (tmp_path / "results" / "demo" / "small.jsonl").write_bytes((ROOT / "results/demo/small.jsonl").read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/python-api.md", "exec"), {})  # noqa: S102 - the repository's own example
    out = capsys.readouterr().out
    records = ResultStore(tmp_path / "results/demo/small.jsonl").read()
    assert records and all(isinstance(r, Record) for r in records)
    for name in {r.params["algorithm.name"] for r in records}:
        assert f"| {name}" in out.lower() or name in out.lower(), name
