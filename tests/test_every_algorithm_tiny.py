"""Every registered algorithm runs on every task it declares, at tiny scale, and passes the
ledger audit (only declared payloads; no raw feature rows, labels or edges leave a client).

The pairs come from the registry, so a newly registered algorithm or a newly declared task
is covered here without editing this file. Whether each one *learns* is checked in its own
test file against a trivial reference; this file guarantees breadth: no (algorithm, task)
pair the tables may ask for crashes, returns non-finite scores or leaks.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmark import checkpoint, state_codec
from benchmark.engine import Engine
from benchmark.registry import ALGORITHMS, load_plugins
from small_configs import tiny_config

load_plugins()

# algorithms that exchange nothing by design (no-communication bounds; Centralized is FedAvg
# with the pooled graph as its one client, so its model does go through the ledger)
SILENT = {"local", "s_ind", "mmind", "mmcen", "amfl_local", "chance"}
PRIMARY = {"node_cls": "accuracy", "link_pred": "auc", "retrieval": "mrr", "matching": "auc", "kg_completion": "mrr",
           "amfl_cls": "accuracy"}


def _pairs() -> list[tuple[str, str]]:
    return [(name, task) for name in ALGORITHMS.names() for task in ALGORITHMS.get(name).tasks]


def _cfg(algo: str, task: str, cache) -> object:
    return tiny_config(algo, task, cache)


def test_every_algorithm_declares_known_tasks():
    pairs = _pairs()
    assert len(pairs) >= 60  # 29 algorithms; a registry that lost its plugins would fail here
    assert {task for _, task in pairs} == set(PRIMARY)


@pytest.mark.parametrize(("algo", "task"), _pairs(), ids=lambda v: v)
def test_runs_on_declared_task_and_passes_audit(algo, task, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "every_algo_cache"  # artifacts shared across cases
    cfg = _cfg(algo, task, cache)
    engine = Engine(cfg)
    rec = engine.run()
    assert rec["status"] == "ok", rec.get("error")
    # its whole simulation checkpoints as JSON + tensors and reads back to the same graph
    path = tmp_path_factory.mktemp("ckpt") / f"sim{checkpoint.SUFFIX}"
    anchors = engine.anchors(engine.sim.algo)
    assert checkpoint.save(path, engine.sim, cfg.hash(), anchors)
    sim = checkpoint.read(path, cfg.hash(), anchors=anchors)[0]
    assert sim.next_round == engine.sim.next_round
    (tree, tensors), (tree2, tensors2) = state_codec.encode(engine.sim, anchors), state_codec.encode(sim, anchors)
    assert tree2 == tree and tensors2.keys() == tensors.keys()
    assert all(torch.equal(tensors[k], tensors2[k]) and tensors[k].dtype == tensors2[k].dtype for k in tensors)
    assert rec["comm"]["violations"] == []
    value = rec["metrics"][f"test/{PRIMARY[task]}"]
    assert math.isfinite(value) and 0.0 <= value <= 1.0
    if algo in SILENT:
        assert rec["comm"]["bytes_up"] == 0
    else:
        assert rec["comm"]["bytes_up"] > 0
