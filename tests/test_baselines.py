"""Every foundation baseline trains, passes the ledger audit, and beats a trivial reference.

The reference is the majority class of each client's training labels, scored on that
client's test nodes and weighted by test size (what a model that learned nothing gets).
"""

from __future__ import annotations

import pytest
import torch

from benchmark.config import build_run_config
from benchmark.engine import Engine
from data_prep.build import build_federation

BASELINES = ["local", "fedavg", "fedprox", "fedgcn", "fedgraphsage", "fedproto", "centralized"]


@pytest.fixture(scope="module")
def small_fed(tmp_path_factory):
    cfg = _cfg("fedavg", tmp_path_factory.mktemp("cache"))
    return cfg.output.cache_dir, build_federation(cfg)


def _cfg(algo: str, cache) -> object:
    return build_run_config({
        "dataset": {"name": "synthetic", "num_nodes": 800},
        "partition": {"name": "dirichlet_label", "num_clients": 4, "alpha": 1.0},
        "missing": {"name": "node_level", "rate": 0.3},
        "algorithm": {"name": algo},
        "model": {"hidden": 32},
        "train": {"rounds": 12, "lr": 0.01},
        "output": {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"},
    })


def majority_reference(fed) -> float:
    correct = total = 0.0
    for c in fed.clients:
        major = torch.bincount(c.y[c.train_mask], minlength=c.num_classes).argmax()
        correct += float((c.y[c.test_mask] == major).sum())
        total += float(c.test_mask.sum())
    return correct / total


@pytest.mark.parametrize("algo", BASELINES)
def test_baseline_beats_majority_and_passes_audit(algo, small_fed):
    cache, fed = small_fed
    rec = Engine(_cfg(algo, cache), fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    reference = majority_reference(fed)
    assert rec["metrics"]["test/accuracy"] > reference + 0.15, (rec["metrics"], reference)
    if algo == "local":
        assert rec["comm"]["bytes_up"] == 0
    else:
        assert rec["comm"]["bytes_up"] > 0


def test_fedgcn_counts_its_setup_exchange(small_fed):
    cache, fed = small_fed
    rec = Engine(_cfg("fedgcn", cache), fed=fed).run()
    assert rec["comm"]["setup_bytes_up"] > 0
    assert {"setup.sum.text", "setup.count.image", "setup.request"} <= set(rec["comm"]["upload_names"])


def test_fedgcn_secure_aggregation_recovers_exact_sums(small_fed):
    """The masked uploads are noise one by one, but their sum is the true neighbour sum."""
    cache, fed = small_fed
    engine = Engine(_cfg("fedgcn", cache), fed=fed)
    algo = engine.algo_cls(engine.algo_cfg, engine._context())
    ups = {c.cid: algo.setup_upload(c, {}) for c in engine.clients}
    total = sum(u["setup.sum.text"] for u in ups.values())
    # the true (A + I) X over the whole graph, available rows only
    pooled = fed.pooled.to(engine.device)
    x = pooled.features["text"] * pooled.available[:, :1]
    ei = pooled.edge_index
    truth = x.double().clone()
    truth.index_add_(0, ei[1], x[ei[0]].double())
    boundary_only = torch.zeros_like(truth)
    assert torch.allclose(total, truth, atol=1e-6), float((total - truth).abs().max())
    one = ups[0]["setup.sum.text"]
    assert not torch.allclose(one, boundary_only, atol=1.0)  # a single upload is masked
