"""Sweeps: cells, resume after a kill (no duplicate, no loss), failed cells, determinism."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.results import ResultStore
from benchmark.sweep import load_suite, run_suite

ROOT = Path(__file__).resolve().parent.parent

SUITE = {
    "name": "resume_test",
    "description": "tiny suite for the resume test",
    "base": {"dataset.num_nodes": 300, "partition.num_clients": 3, "partition.alpha": 1.0,
             "model.hidden": 16, "train.rounds": 4},
    "grid": {"algorithm.name": ["local", "fedavg"], "missing.rate": [0.0, 0.3]},
    "seeds": [0, 1],
    "default_scale": "tiny",
    "table": {"rows": "algorithm.name", "columns": "missing.rate", "metrics": ["accuracy"]},
    "plots": [{"x": "missing.rate", "metric": "accuracy", "hue": "algorithm.name"}],
}


def _write_suite(tmp_path: Path, **changes) -> Path:
    spec = {**SUITE, **changes}
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_cells_have_stable_ids(tmp_path):
    suite = load_suite(str(_write_suite(tmp_path)))
    a, b = suite.cells("tiny"), suite.cells("tiny")
    assert len(a) == 8 and [c.cell_id for c in a] == [c.cell_id for c in b]
    assert len({c.cell_id for c in a}) == 8


def test_killed_sweep_resumes_only_missing_cells(tmp_path):
    suite_path = _write_suite(tmp_path)
    results = tmp_path / "results"
    store = results / "resume_test" / "tiny.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    cmd = [sys.executable, str(ROOT / "run_benchmark.py"), "sweep", str(suite_path), "--results", str(results),
           "--jobs", "1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        if store.exists() and len(store.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = ResultStore(store).read()
    assert 3 <= len(before) < 8, "the kill should land mid-sweep"
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{8 - len(before)} cells run now" in out.stdout
    after = ResultStore(store).read()
    ids = [r.cell_id for r in after]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert {r.cell_id for r in before} <= set(ids)
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "0 cells run now" in again.stdout and len(ResultStore(store).read()) == 8


def test_failed_cell_is_recorded_and_sweep_goes_on(tmp_path):
    path = _write_suite(tmp_path, name="fail_test", grid={"algorithm.name": ["fedavg"], "train.lr": [0.01, 1e30]},
                        seeds=[0])
    records, ran = run_suite(load_suite(str(path)), "tiny", jobs=1, results_dir=tmp_path / "res", progress=False)
    assert ran == 2
    by_lr = {r.params["train.lr"]: r for r in records}
    assert by_lr[0.01].status == "ok"
    bad = by_lr[1e30]
    assert bad.status == "failed" and bad.error["reason"] and isinstance(bad.error["round"], int)


def test_same_seed_identical_other_seed_other_partition(tmp_path):
    def cfg(seed: int):
        return build_run_config({"seed": seed, "dataset": {"num_nodes": 300}, "partition": {"num_clients": 3},
                                 "model": {"hidden": 16}, "train": {"rounds": 3},
                                 "output": {"cache_dir": str(tmp_path / "cache")}})

    a, b, c = (Engine(cfg(s)).run() for s in (0, 0, 1))
    assert a["metrics"] == b["metrics"] and a["provenance"]["artifact_hash"] == b["provenance"]["artifact_hash"]
    assert a["provenance"]["artifact_hash"] != c["provenance"]["artifact_hash"]
    assert a["provenance"]["artifact_recipe"] == c["provenance"]["artifact_recipe"]
    assert a["client_sizes"] != c["client_sizes"]
    json.dumps(a)  # records are JSON-serializable as they are


def test_only_selects_cells_by_grid_value_and_seed():
    from benchmark.errors import ConfigError
    from benchmark.sweep import load_suite, select_cells

    cells = load_suite("ci").cells("tiny")
    picked = select_cells(cells, {"algorithm.name": "fedavg", "seed": 1})
    assert [(c.params["algorithm.name"], c.seed) for c in picked] == [("fedavg", 1), ("fedavg", 1)]
    assert {c.params["missing.rate"] for c in picked} == {0.0, 0.6}
    assert select_cells(cells, {}) == cells
    with pytest.raises(ConfigError, match="not a grid key"):
        select_cells(cells, {"missing.rat": 0.6})


@pytest.mark.parametrize("isolate", [False, True])
def test_isolate_runs_every_cell_in_its_own_fresh_process(tmp_path, isolate):
    """Per-cell peak memory needs one process per cell: a pooled worker's RSS keeps what earlier
    cells left. Without isolation (jobs 1) the cells run in this process."""
    path = _write_suite(tmp_path, name="isolate_test", grid={"algorithm.name": ["fedavg"], "missing.rate": [0.0, 0.3]},
                        seeds=[0], isolate=isolate)
    records, ran = run_suite(load_suite(str(path)), "tiny", jobs=1, results_dir=tmp_path / "res", progress=False)
    assert ran == 2 and all(r.status == "ok" for r in records)
    pids = {r.worker_pid for r in records}
    assert {r.sweep_backend for r in records} == {"joblib"}
    if isolate:
        assert len(pids) == 2 and os.getpid() not in pids
    else:
        assert pids == {os.getpid()}
    assert all(0 <= r.memory_growth_mb <= r.peak_memory_mb for r in records)


def test_workers_record_the_code_state_the_sweep_started_with(tmp_path, monkeypatch):
    """Fresh worker processes take the sweep's pinned git state, not a state read after later edits."""
    monkeypatch.setenv("FEDMM_GIT_STATE", "0123abcd:1")
    path = _write_suite(tmp_path, name="pin_test", grid={"algorithm.name": ["fedavg"]}, seeds=[0], isolate=True)
    records, _ = run_suite(load_suite(str(path)), "tiny", jobs=1, results_dir=tmp_path / "res", progress=False)
    prov = records[0].provenance
    assert (prov["git_sha"], prov["git_dirty"]) == ("0123abcd", True)


def test_eta_is_mean_cell_time_times_remaining_over_jobs():
    from benchmark.cell import _eta

    assert _eta([], 5, 1) == "" and _eta([10.0], 0, 1) == ""
    assert _eta([10.0, 20.0], 4, 1) == " eta 0:01:00"  # 15 s a cell, 4 left, one at a time
    assert _eta([10.0, 20.0], 4, 2) == " eta 0:00:30"
    assert _eta([3600.0], 2, 1) == " eta 2:00:00"


def test_control_subgrid_keeps_the_other_cells_ids_and_stays_out_of_figures(tmp_path):
    """Adding a control sub-grid to a suite leaves every existing cell's id alone (a sweep only
    runs the new cells), and the figures drop the control runs while the table brackets them."""
    from fedmm_bench.cli import write_suite_plots, write_suite_tables

    plain = load_suite(str(_write_suite(tmp_path)))
    grids = [SUITE["grid"], {"algorithm.name": ["fedavg"], "missing.rate": [0.3], "missing.content": ["shuffle"]}]
    control = {"where": {"missing.content": "shuffle"}, "label": "content shuffled"}
    path = _write_suite(tmp_path, name="control_test", grid=grids, control=control)
    suite = load_suite(str(path))
    old = {c.cell_id for c in plain.cells("tiny")}
    # same ids for the cells the plain suite had once the suite name is the same
    renamed = load_suite(str(_write_suite(tmp_path, grid=grids, control=control)))
    assert old < {c.cell_id for c in renamed.cells("tiny")} and len(renamed.cells("tiny")) == len(old) + 2
    records, _ = run_suite(suite, "tiny", jobs=1, results_dir=tmp_path / "res", progress=False)
    assert len(records) == 10
    (stem, md), = write_suite_tables(suite, records, "tiny", str(tmp_path / "tables"))
    assert "under the control (content shuffled)" in md
    shuffled = [r.metrics["test/accuracy"] for r in records if r.params.get("missing.content") == "shuffle"]
    assert f"[{100 * sum(shuffled) / 2:.2f}]" in md
    seen: list[list[dict]] = []
    import benchmark.report.suite_plots as plots
    real = plots.suite_plots
    try:
        plots.suite_plots = lambda name, spec, recs, out: seen.append(recs) or []  # type: ignore[assignment]
        write_suite_plots(suite, records, "tiny", str(tmp_path / "fig"))
    finally:
        plots.suite_plots = real
    assert len(seen[0]) == 8 and all("missing.content" not in r.params for r in seen[0])


@pytest.mark.parametrize("control, match", [
    ({"where": {"missing.contents": "shuffle"}}, "not a grid key"),
    ({"where": {"missing.content": "keep"}}, "in no sub-grid"),
    ({"missing.content": "shuffle"}, "'where'"),
])
def test_control_must_name_what_the_grid_runs(tmp_path, control, match):
    from benchmark.errors import ConfigError

    grids = [SUITE["grid"], {"algorithm.name": ["fedavg"], "missing.content": ["shuffle"]}]
    with pytest.raises(ConfigError, match=match):
        load_suite(str(_write_suite(tmp_path, grid=grids, control=control)))


def test_stale_cells_run_again_and_current_ones_do_not(tmp_path):
    """A base change keeps the cell ids; the sweep sees the stored records measure the old
    config, runs those cells again, and the new records win in the store."""
    from benchmark.sweep import done_cells

    small = {"name": "stale_test", "grid": {"algorithm.name": ["fedavg"], "missing.rate": [0.0, 0.3]},
             "seeds": [0], "base": {**SUITE["base"], "train.rounds": 2}}
    results = tmp_path / "res"
    first, ran = run_suite(load_suite(str(_write_suite(tmp_path, **small))), "tiny", results_dir=results,
                           progress=False)
    assert ran == 2
    suite = load_suite(str(_write_suite(tmp_path, **small)))
    stored = ResultStore(results / "stale_test" / "tiny.jsonl").read()
    assert done_cells(suite.cells("tiny"), stored) == {r.cell_id for r in first}
    # a device or cache location is how a run executes, not what it measures
    moved = load_suite(str(_write_suite(tmp_path, **{**small, "base": {**small["base"], "train.device": "cpu",
                                                                        "output.cache_dir": str(tmp_path / "c")}})))
    assert len(done_cells(moved.cells("tiny"), stored)) == 2
    changed = load_suite(str(_write_suite(tmp_path, **{**small, "base": {**small["base"], "missing.name": "client_level"}})))
    assert [c.cell_id for c in changed.cells("tiny")] == [c.cell_id for c in suite.cells("tiny")]
    assert done_cells(changed.cells("tiny"), stored) == set()
    assert len(done_cells(changed.cells("tiny"), stored, keep_stale=True)) == 2
    kept, ran = run_suite(changed, "tiny", results_dir=results, progress=False, keep_stale=True)
    assert ran == 0
    again, ran = run_suite(changed, "tiny", results_dir=results, progress=False)
    assert ran == 2 and all(r.config["missing"]["name"] == "client_level" for r in again)
    assert len(ResultStore(results / "stale_test" / "tiny.jsonl").read()) == 4
    _, ran = run_suite(changed, "tiny", results_dir=results, progress=False)
    assert ran == 0


def test_a_higher_task_protocol_version_makes_records_stale(monkeypatch):
    from benchmark import registry as R
    from benchmark.record import Record
    from benchmark.results import protocol_hash, stale_reasons

    cfg = build_run_config({"task": {"name": "node_cls"}})
    record = Record(status="ok", seed=0, provenance={"protocol": protocol_hash(cfg)}, config=cfg.to_dict())
    assert stale_reasons(record, cfg) == []
    R.load_plugins()
    monkeypatch.setattr(R.TASKS.get("node_cls"), "protocol_version", 7, raising=False)
    assert stale_reasons(record, cfg) == ["protocol"]


def test_a_higher_algorithm_revision_makes_records_stale(monkeypatch):
    """A method whose computation changed with no config key to show it (issue 28: FedMBridge's
    generator) raises its revision; records made before it, which carry none, go stale."""
    from benchmark import registry as R
    from benchmark.record import Record
    from benchmark.results import protocol_hash, provenance, stale_reasons

    cfg = build_run_config({"algorithm": {"name": "fedavg"}})
    record = Record(status="ok", seed=0, provenance={"protocol": protocol_hash(cfg)}, config=cfg.to_dict())
    assert stale_reasons(record, cfg) == []
    R.load_plugins()
    monkeypatch.setattr(R.ALGORITHMS.get("fedavg"), "revision", 3, raising=False)
    assert stale_reasons(record, cfg) == ["algorithm revision: 1 -> 3"]
    record.provenance = provenance(cfg, "a", "r", torch.device("cpu"))
    assert record.provenance["algorithm_revision"] == 3 and stale_reasons(record, cfg) == []


def test_the_triton_distance_kernel_is_part_of_the_protocol_and_eager_is_not():
    """train.distance_kernel: triton sums in another order, so its records measure another
    protocol; eager is how records were always made, so records without the key stay current."""
    from benchmark.record import Record
    from benchmark.results import protocol_hash, stale_reasons

    eager = build_run_config({"task": {"name": "kg_completion"}, "algorithm": {"name": "fede"}})
    triton = build_run_config({"task": {"name": "kg_completion"}, "algorithm": {"name": "fede"},
                               "train": {"distance_kernel": "triton"}})
    older = eager.to_dict()
    del older["train"]["distance_kernel"]  # a record made before the option existed
    old = Record(status="ok", seed=0, provenance={"protocol": protocol_hash(eager)}, config=older)
    assert stale_reasons(old, eager) == [] and stale_reasons(old, triton) == ["protocol"]
    made = Record(status="ok", seed=0, provenance={"protocol": protocol_hash(triton)}, config=triton.to_dict())
    assert stale_reasons(made, triton) == [] and stale_reasons(made, eager) == ["protocol"]


def test_failed_cells_are_kept_with_a_hint_to_retry(caplog):
    from benchmark.record import Record
    from benchmark.sweep import done_cells

    suite = load_suite(str(Path(__file__).resolve().parent.parent / "benchmark" / "suites" / "ci.yaml"))
    cells = suite.cells("tiny")[:2]
    records = [Record(status="failed", seed=0, cell_id=cells[0].cell_id)]
    with caplog.at_level("WARNING", logger="benchmark.sweep"):
        assert done_cells(cells, records) == {cells[0].cell_id}
    assert "1 stored cells failed and are not run again; --retry-failed runs them" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="benchmark.sweep"):
        assert done_cells(cells, records, retry_failed=True) == set()
    assert "failed" not in caplog.text
