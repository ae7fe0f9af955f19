"""Every method of a committed store sees the same federation in a given seed: what makes the
tables' paired tests over seeds (benchmark/report/paired_tests.py) paired.

A record's ``artifact_hash`` is the hash of its federated artifact (the dataset's
fingerprint, the partition into clients, the missing-modality masks, the split and the seed;
data_prep/artifact.py). So within a store, the current records of one seed and one setting
(every grid value but the method's) must name a single artifact."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from benchmark.report.suite_tables import suite_records
from benchmark.sweep import load_suite

ROOT = Path(__file__).resolve().parent.parent
STORES = sorted(p.parent.name for p in (ROOT / "results").glob("*/small.jsonl"))


def artifacts_by_seed_and_setting(records) -> dict[tuple, set[str]]:  # noqa: ANN001
    groups: dict[tuple, set[str]] = defaultdict(set)
    for r in records:
        if r.ok:
            setting = json.dumps({k: v for k, v in r.params.items() if not k.startswith("algorithm.")},
                                 sort_keys=True, default=str)
            groups[(r.seed, setting)].add(str(r.provenance.get("artifact_hash")))
    return groups


@pytest.mark.parametrize("name", STORES)
def test_every_method_sees_one_federation_per_seed(name):
    records = suite_records(load_suite(name), "small", ROOT / "results")
    groups = artifacts_by_seed_and_setting(records)
    assert groups, f"{name}: no ok record"
    split = {k: v for k, v in groups.items() if len(v) > 1}
    assert not split, f"{name}: {len(split)} (seed, setting) groups hold several artifacts, e.g. {next(iter(split.items()))}"


def test_the_check_can_fail():
    """Two methods of one seed and setting on different artifacts are caught."""
    from benchmark.record import Record

    recs = [Record(status="ok", seed=0, params={"algorithm.name": a, "missing.rate": 0.3},
                   provenance={"artifact_hash": h}) for a, h in (("fedavg", "x"), ("fedmpo", "y"))]
    assert artifacts_by_seed_and_setting(recs)[(0, '{"missing.rate": 0.3}')] == {"x", "y"}
