"""Every suite in benchmark/suites/ but the CI smoke suites has a committed small store in which
every applicable cell's newest record is ok (issue 17's must-show). A new suite fails here
until `sweep NAME --scale small` has run and its store is committed; each store's findings
are pinned by its own claims test."""

from __future__ import annotations

from pathlib import Path

import pytest
from small_results import PENDING, load_small

ROOT = Path(__file__).resolve().parent.parent
SMOKE = {"ci", "kg_smoke", "mm_tasks_smoke"}   # run at tiny scale by `regress`, no small store
SUITES = sorted(p.stem for p in (ROOT / "benchmark" / "suites").glob("*.yaml") if p.stem not in SMOKE)


def test_the_smoke_suites_exist_and_everything_else_is_listed():
    assert SMOKE <= {p.stem for p in (ROOT / "benchmark" / "suites").glob("*.yaml")}
    assert len(SUITES) >= 27


@pytest.mark.parametrize("name", SUITES)
def test_suite_has_a_complete_small_store_without_failed_cells(name):
    suite, records, n_cells = load_small(name)
    failed = [r.cell_id for r in records if r.status != "ok"]
    if name in PENDING:  # being re-run after a protocol or suite change (results/pending_rerun.json)
        assert records, f"{name}: a pending store keeps its old records until the re-run replaces them"
    else:
        assert len(records) == n_cells, f"{name}: {n_cells - len(records)} of {n_cells} cells have no record"
    assert not failed, f"{name}: {len(failed)} failed cells, e.g. {failed[0]}"
