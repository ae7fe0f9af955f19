"""Reading the committed small-scale results (``results/<suite>/small.jsonl``) in claims tests.

The claims tests pin what the closing notes say of those numbers: every cell recorded and
ok, the committed tables equal freshly generated ones, and each stated finding holds.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from fedmm_bench.cli import write_suite_tables
from benchmark.config import build_run_config
from benchmark.results import ResultStore, pending_stores, stale_reasons
from benchmark.tuned import apply_choices
from benchmark.sweep import applicable, latest_records, load_suite, select_cells

ROOT = Path(__file__).resolve().parent.parent
PENDING = pending_stores(ROOT / "results")


def load_small(name: str, only: dict[str, Any] | None = None) -> tuple[Any, list[dict], int]:
    """(suite, newest record of each applicable cell, number of applicable cells).

    A store listed in results/pending_rerun.json gives the newest record of every cell it
    holds (matching ``only``), whether or not the suite still has that cell: until its re-run
    ends, its committed table, findings and claims are those of the records it was made from."""
    store = ROOT / "results" / name / "small.jsonl"
    if not store.exists():
        pytest.fail(f"{store.relative_to(ROOT)} is missing: run `sweep {name} --scale small` and commit it")
    suite = load_suite(name)
    cells = [c for c in select_cells(suite.cells("small"), only or {}) if applicable(c)]
    if name in PENDING:
        records = [r for r in latest_records(ResultStore(store).read())
                   if all(r.params.get(k) == v for k, v in (only or {}).items())]
    else:
        records = latest_records(ResultStore(store).read(), {c.cell_id for c in cells})
    return suite, records, len(cells)


def assert_complete_and_tables_generated(name: str, tmp_path: Path, only: dict[str, Any] | None = None,
                                         clean: bool = True, seeds: int = 3) -> None:
    """Every applicable cell has an ok record over seeds 0 to ``seeds`` - 1, the committed
    tables are generated from them, and (``clean``) no record was made by uncommitted code."""
    suite, records, n_cells = load_small(name, only)
    # each cell as a sweep runs it: with its finished tuning study's choice (benchmark.tuned)
    tuned = apply_choices(suite, select_cells(suite.cells("small"), only or {}), ROOT / "results")
    configs = {c.cell_id: c.config for c in tuned}
    stale = {r.cell_id: why for r in records if r.cell_id in configs
             and (why := stale_reasons(r, build_run_config(configs[r.cell_id])))}
    if name in PENDING:
        # made before the change results/pending_rerun.json names: some record is stale or a
        # cell has none (else take the store off the list); its committed tables were generated
        # from these records under the suite of their day, and are regenerated with the re-run
        current = [r for r in records if r.cell_id in configs and r.cell_id not in stale]
        assert len(current) < n_cells, f"{name} is current: remove it from results/pending_rerun.json"
        assert all(r.status == "ok" for r in records)
        return
    else:
        assert len(records) == n_cells
        # every kept record measures its cell's config as the suite states it now (what a sweep
        # would skip): a protocol or base change since the run fails here until it is re-run
        assert not stale, f"{len(stale)} stale records, e.g. {next(iter(stale.values()))}"
    assert all(r.status == "ok" for r in records)
    assert {r.seed for r in records} == set(range(seeds))
    if clean:
        assert not any(r.provenance["git_dirty"] for r in records), "a record was made by uncommitted code"
    for stem, _ in write_suite_tables(suite, records, "small", str(tmp_path)):
        assert (ROOT / "tables" / f"{stem}.md").read_text() == (tmp_path / f"{stem}.md").read_text(), stem


def mean_metric(records: list[dict], metric: str, *keys: str) -> dict[tuple, float]:
    """Mean over seeds of ``test/<metric>`` per combination of the given params."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        out[tuple(r.params.get(k) for k in keys)].append(r.metrics[f"test/{metric}"])
    return {k: mean(v) for k, v in out.items()}
