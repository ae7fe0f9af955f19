"""The shared model learns on the real data (issue 26): TikTok retrieval no longer collapses,
and FedAvg-Zero on FB15K-237 typing comes near a linear model instead of the majority class.

Both were the harness's pathologies, not the methods': raw non-negative TikTok rows sent the
retrieval loss to ln(gallery) within ten steps with every score tied, and unconditioned FB15K
text rows kept FedAvg-Zero at 23-26% where logistic regression gets 49%."""

from __future__ import annotations

import pytest
import torch
from threadpoolctl import threadpool_limits

from benchmark import registry as R
from benchmark.config import build_run_config, component_config
from benchmark.engine import Engine
from benchmark.federation import build_federation
from data_prep.datasets.sources import MIRROR

needs_tiktok = pytest.mark.skipif(not (MIRROR / "tiktok").is_dir(), reason="shared/data/tiktok is not available")
needs_fb15k = pytest.mark.skipif(not (MIRROR / "fb15k237").is_dir(), reason="shared/data/fb15k237 is not available")
STEPS = 30


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):
        yield


@needs_tiktok
def test_shared_model_fits_tiktok_training_pairs_centrally(tmp_path):
    """Full TikTok graph, no missingness, pooled (the split into clients plays no part), the
    harness's own model (MLP backbone) and retrieval loss: after 30 Adam steps training-pair
    R@5 is at least 3x chance and the scores have not collapsed (measured, seed 0: R@5 0.0050
    at step 20, 0.0079 at step 30, 0.0102 at step 40, against chance 0.0012)."""
    R.load_plugins()
    cfg = build_run_config({
        "seed": 0, "dataset": {"name": "tiktok"}, "partition": {"name": "iid", "num_clients": 5},
        "missing": {"name": "none"}, "task": {"name": "retrieval"}, "algorithm": {"name": "centralized"},
        "model": {"hidden": 64, "backbone": "mlp", "dropout": 0.0},
        "output": {"cache_dir": str(tmp_path), "checkpoint_dir": str(tmp_path / "ck")}})
    fed = build_federation(cfg)
    task = R.TASKS.get("retrieval")(component_config(R.TASKS, cfg.task, "task"))
    torch.manual_seed(0)
    model = R.MODELS.get("multimodal_gnn")(fed.feature_dims, task.out_dim(fed.num_classes), cfg.model)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    pooled = fed.pooled
    for _ in range(STEPS):
        opt.zero_grad()
        task.loss(model, pooled).backward()
        opt.step()
    train = task.evaluate(model, pooled)["train"]
    chance = 5 / train["n"]
    assert train["recall@5"] >= 3 * chance, (train, chance)
    assert train["spread"] > 1e-3, train


@needs_fb15k
def test_fedavg_zero_learns_fb15k_typing(tmp_path):
    """FB15K-237 typing, no missingness, 10 Dirichlet(0.5) clients, 15 rounds of 3 epochs:
    FedAvg-Zero reaches at least 40% accuracy (the majority class is 18.8%; a centralized
    logistic regression on the text rows 49%). Measured at seed 0: 0.43 at round 10."""
    cfg = build_run_config({
        "seed": 0, "dataset": {"name": "fb15k237_typing"},
        "partition": {"name": "dirichlet_label", "alpha": 0.5, "num_clients": 10},
        "missing": {"name": "none"}, "task": {"name": "node_cls"}, "algorithm": {"name": "fedavg"},
        "model": {"hidden": 64},
        "train": {"rounds": 15, "local_epochs": 3, "lr": 0.01},
        "output": {"cache_dir": str(tmp_path), "checkpoint_dir": str(tmp_path / "ck")}})
    rec = Engine(cfg).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["test/accuracy"] >= 0.40, rec["metrics"]
    assert rec["guard"]["collapsed"] is False
