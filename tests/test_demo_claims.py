"""The committed demo results show what the foundation issue asks of them.

`results/demo/small.jsonl` is produced by `python run_benchmark.py` (the demo) and
committed; these tests read it, so they fail if a re-run of the demo stops showing that
federation helps, that the centralized reference bounds FedAvg, and that missing modalities
hurt. The committed table must also be exactly what `table demo` generates from it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean

import pytest

from fedmm_bench.cli import write_suite_tables
from benchmark.results import ResultStore
from benchmark.sweep import latest_records, load_suite

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "results" / "demo" / "small.jsonl"


@pytest.fixture(scope="module")
def demo():
    if not STORE.exists():
        pytest.fail("results/demo/small.jsonl is missing: run `python run_benchmark.py` and commit it")
    suite = load_suite("demo")
    cells = suite.cells("small")
    records = latest_records(ResultStore(STORE).read(), {c.cell_id for c in cells})
    acc: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in records:
        assert r.status == "ok", r.error
        acc[(r.params["algorithm.name"], r.params["missing.rate"])].append(r.metrics["test/accuracy"])
    return suite, records, {k: mean(v) for k, v in acc.items()}, len(cells)


def test_every_cell_recorded(demo):
    suite, records, acc, n_cells = demo
    assert len(records) == n_cells == 54  # 7 methods and 3 references (chance, linear; centralized is both) x 3 rates x 2 seeds


def test_fedavg_beats_local_and_centralized_bounds_it_at_30_percent(demo):
    _, _, acc, _ = demo
    assert acc[("fedavg", 0.3)] > acc[("local", 0.3)]
    assert acc[("centralized", 0.3)] >= acc[("fedavg", 0.3)]


def test_accuracy_falls_as_missing_rate_rises(demo):
    _, _, acc, _ = demo
    for algo in {a for a, _ in acc} - {"chance"}:  # chance predicts the majority training class at every rate
        assert acc[(algo, 0.0)] > acc[(algo, 0.3)] > acc[(algo, 0.6)], algo


def test_committed_table_is_generated(demo, tmp_path):
    suite, records, _, _ = demo
    [(stem, markdown)] = write_suite_tables(suite, records, "small", str(tmp_path))
    committed = ROOT / "tables" / f"{stem}.md"
    assert committed.read_text() == (tmp_path / f"{stem}.md").read_text()
    assert (ROOT / "tables" / f"{stem}.tex").read_text() == (tmp_path / f"{stem}.tex").read_text()
