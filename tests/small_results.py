"""Reading the committed small-scale results (``results/<suite>/small.jsonl``) in claims tests.

The claims tests pin what the closing notes say of those numbers: every cell recorded and
ok, the committed tables equal freshly generated ones, and each stated finding holds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from benchmark.cli import write_suite_tables
from benchmark.config import build_run_config
from benchmark.results import ResultStore, stale_reasons
from benchmark.sweep import applicable, latest_records, load_suite, select_cells

ROOT = Path(__file__).resolve().parent.parent
PENDING = json.loads((ROOT / "results" / "pending_rerun.json").read_text())["stores"]


def load_small(name: str, only: dict[str, Any] | None = None) -> tuple[Any, list[dict], int]:
    """(suite, newest record of each applicable cell, number of applicable cells)."""
    store = ROOT / "results" / name / "small.jsonl"
    if not store.exists():
        pytest.fail(f"{store.relative_to(ROOT)} is missing: run `sweep {name} --scale small` and commit it")
    suite = load_suite(name)
    cells = [c for c in select_cells(suite.cells("small"), only or {}) if applicable(c)]
    records = latest_records(ResultStore(store).read(), {c.cell_id for c in cells})
    return suite, records, len(cells)


def assert_complete_and_tables_generated(name: str, tmp_path: Path, only: dict[str, Any] | None = None,
                                         clean: bool = True, seeds: int = 3) -> None:
    """Every applicable cell has an ok record over seeds 0 to ``seeds`` - 1, the committed
    tables are generated from them, and (``clean``) no record was made by uncommitted code."""
    suite, records, n_cells = load_small(name, only)
    configs = {c.cell_id: c.config for c in select_cells(suite.cells("small"), only or {})}
    stale = {r["cell_id"]: why for r in records if (why := stale_reasons(r, build_run_config(configs[r["cell_id"]])))}
    if name in PENDING:
        # made before the change results/pending_rerun.json names: still stale (else take it off
        # the list), every method cell recorded; the reference cells come with the re-run
        assert stale, f"{name} is current: remove it from results/pending_rerun.json"
        refs = set(suite.spec.get("references") or [])
        assert len(records) == n_cells - sum(1 for c in select_cells(suite.cells("small"), only or {})
                                             if c.algorithm in refs and c.cell_id not in {r["cell_id"] for r in records}
                                             and applicable(c))
    else:
        assert len(records) == n_cells
        # every kept record measures its cell's config as the suite states it now (what a sweep
        # would skip): a protocol or base change since the run fails here until it is re-run
        assert not stale, f"{len(stale)} stale records, e.g. {next(iter(stale.values()))}"
    assert all(r["status"] == "ok" for r in records)
    assert {r["seed"] for r in records} == set(range(seeds))
    if clean:
        assert not any(r["provenance"]["git_dirty"] for r in records), "a record was made by uncommitted code"
    for stem, _ in write_suite_tables(suite, records, "small", str(tmp_path)):
        assert (ROOT / "tables" / f"{stem}.md").read_text() == (tmp_path / f"{stem}.md").read_text(), stem


def mean_metric(records: list[dict], metric: str, *keys: str) -> dict[tuple, float]:
    """Mean over seeds of ``test/<metric>`` per combination of the given params."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        out[tuple(r["params"].get(k) for k in keys)].append(r["metrics"][f"test/{metric}"])
    return {k: mean(v) for k, v in out.items()}
