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

from benchmark import checkpoint
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.registry import ALGORITHMS, load_plugins

load_plugins()

# algorithms that exchange nothing by design (no-communication bounds; Centralized is FedAvg
# with the pooled graph as its one client, so its model does go through the ledger)
SILENT = {"local", "s_ind", "mmind", "mmcen", "amfl_local"}
PRIMARY = {"node_cls": "accuracy", "link_pred": "auc", "retrieval": "mrr", "matching": "auc", "kg_completion": "mrr",
           "amfl_cls": "accuracy"}


def _pairs() -> list[tuple[str, str]]:
    return [(name, task) for name in ALGORITHMS.names() for task in ALGORITHMS.get(name).tasks]


def _cfg(algo: str, task: str, cache) -> object:
    out = {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"}
    if task == "kg_completion":
        return build_run_config({
            "dataset": {"name": "synthetic_kg", "num_entities": 120},
            "partition": {"name": "relation_id", "num_clients": 3},
            "missing": {"name": "kg_items", "rate": 0.5},
            "task": {"name": task, "dim": 8, "num_negatives": 16, "batch_size": 256},
            "algorithm": {"name": algo},
            "train": {"rounds": 2, "local_epochs": 1, "lr": 0.05, "device": "auto"},
            "output": out,
        })
    if task == "amfl_cls":
        return build_run_config({
            "dataset": {"name": "av_digits"},
            "partition": {"name": "amfl_population", "num_clients": 4, "samples_mean": 24, "samples_std": 0.0},
            "missing": {"name": "none"},
            "task": {"name": task},
            "algorithm": {"name": algo},
            "train": {"rounds": 2, "local_epochs": 1, "lr": 0.01, "device": "auto"},
            "output": out,
        })
    return build_run_config({
        "dataset": {"name": "synthetic", "num_nodes": 240},
        "partition": {"name": "louvain", "num_clients": 3},
        "missing": {"name": "node_level", "rate": 0.3},
        "task": {"name": task},
        "algorithm": {"name": algo},
        "model": {"hidden": 16},
        "train": {"rounds": 2, "local_epochs": 1, "lr": 0.01, "device": "auto"},
        "output": out,
    })


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
    # its whole simulation checkpoints and reads back under the safe loader (weights_only + allowlist)
    path = tmp_path_factory.mktemp("ckpt") / "sim.pt"
    assert checkpoint.save(path, engine.sim, cfg.hash())
    assert checkpoint.read(path, cfg.hash())[0].next_round == engine.sim.next_round
    assert rec["comm"]["violations"] == []
    value = rec["metrics"][f"test/{PRIMARY[task]}"]
    assert math.isfinite(value) and 0.0 <= value <= 1.0
    if algo in SILENT:
        assert rec["comm"]["bytes_up"] == 0
    else:
        assert rec["comm"]["bytes_up"] > 0
